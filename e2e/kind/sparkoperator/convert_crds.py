"""The Spark operator's CRDs as ``apiextensions.k8s.io/v1``, schema kept (kind e2e only).

Why: the SparkApplication backend is proven on kind with the kubeflow Spark operator built
from the Go module proxy, and the version the proxy serves
(``github.com/GoogleCloudPlatform/spark-on-k8s-operator``, late 2020) ships its CRDs as
``apiextensions.k8s.io/v1beta1``, which Kubernetes 1.22+ no longer serves. The conversion is
mechanical and keeps the OpenAPI schema as the module wrote it:

1. ``spec.validation.openAPIV3Schema`` becomes each version's ``schema.openAPIV3Schema``;
   ``spec.subresources`` and ``spec.additionalPrinterColumns`` (``JSONPath`` ->
   ``jsonPath``) move into each version (v1 has them per version);
2. v1 wants a structural schema: an object node without a ``type`` gets ``type: object``
   (controller-gen of that time left it out at the root), nothing else is touched;
3. ``status`` and ``creationTimestamp: null`` (generator leftovers) are dropped;
4. the group is under ``k8s.io``, which v1 protects: the CRD says it is not an approved
   Kubernetes API (``api-approved.kubernetes.io: unapproved, ...``), as the Spark operator's
   own later v1 CRDs do.

    python convert_crds.py IN.yaml... > crds-v1.yaml
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]
APPROVAL = "api-approved.kubernetes.io"
UNAPPROVED = "unapproved, the spark-on-k8s-operator's v1beta1 CRD converted to v1"


def structural(node: Any) -> Any:
    """Step 2, recursively: object nodes say ``type: object``."""
    if isinstance(node, dict):
        fixed = {key: structural(value) for key, value in node.items()}
        if "properties" in fixed and "type" not in fixed:
            fixed["type"] = "object"
        return fixed
    if isinstance(node, list):
        return [structural(item) for item in node]
    return node


def printer_columns(columns: list[Obj]) -> list[Obj]:
    return [
        {("jsonPath" if key == "JSONPath" else key): value for key, value in column.items()}
        for column in columns
    ]


def convert(crd: Obj) -> Obj:
    """One v1beta1 CRD as v1 (steps 1-3)."""
    if crd.get("apiVersion") != "apiextensions.k8s.io/v1beta1":
        raise ValueError(f"{crd.get('metadata', {}).get('name')}: not a v1beta1 CRD")
    old = crd["spec"]
    schema = structural(old.get("validation", {}).get("openAPIV3Schema", {}))
    schema.setdefault("type", "object")
    names = [v["name"] for v in old.get("versions") or []] or [old["version"]]
    storage = {v["name"]: v.get("storage", False) for v in old.get("versions") or []}
    versions = []
    for name in names:
        version: Obj = {
            "name": name,
            "served": True,
            "storage": storage.get(name, len(names) == 1),
            "schema": {"openAPIV3Schema": schema},
        }
        if old.get("subresources"):
            version["subresources"] = old["subresources"]
        if old.get("additionalPrinterColumns"):
            version["additionalPrinterColumns"] = printer_columns(old["additionalPrinterColumns"])
        versions.append(version)
    metadata = {k: v for k, v in crd["metadata"].items() if k != "creationTimestamp"}
    if old["group"] == "k8s.io" or old["group"].endswith(".k8s.io"):
        metadata["annotations"] = {**metadata.get("annotations", {}), APPROVAL: UNAPPROVED}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": {
            "group": old["group"],
            "names": old["names"],
            "scope": old["scope"],
            "versions": versions,
        },
    }


def main(paths: list[str]) -> int:
    crds = [
        convert(doc) for path in paths for doc in yaml.safe_load_all(Path(path).read_text()) if doc
    ]
    yaml.safe_dump_all(crds, sys.stdout, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
