"""The Spark operator's CRDs as v1 (e2e/kind/sparkoperator/convert_crds.py) and our
SparkApplication against their real schema on the testbed's apiserver.

The kind e2e runs a SparkApplication through the Spark operator built from the Go module
proxy; these checks fail early, without Docker: the conversion of its v1beta1 CRDs keeps the
schema and is accepted by a 1.33 apiserver, and the SparkApplication our operator builds
passes that schema with nothing pruned.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from popfleet_operator.builders import audits
from popfleet_operator.model import specs
from popfleet_testbed import cluster, waiting
from tests.integration.kind_static.conftest import load

convert = load("sparkoperator/convert_crds")
MODULE = "github.com/GoogleCloudPlatform/spark-on-k8s-operator"
VERSION = "v0.0.0-20201215015655-2e8b733f5ad0"  # e2e/kind/sparkoperator/build.sh
Obj = dict[str, Any]


def old_crd(**spec: Any) -> Obj:
    return {
        "apiVersion": "apiextensions.k8s.io/v1beta1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.example.k8s.io", "creationTimestamp": None},
        "spec": {
            "group": "example.k8s.io",
            "names": {"kind": "Thing", "plural": "things"},
            "scope": "Namespaced",
            "version": "v1",
            "validation": {
                "openAPIV3Schema": {
                    "properties": {"spec": {"properties": {"n": {"type": "integer"}}}}
                }
            },
            **spec,
        },
        "status": {"storedVersions": []},
    }


def test_the_schema_moves_into_the_version_and_object_nodes_get_their_type() -> None:
    crd = convert.convert(old_crd(subresources={"status": {}}))
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1" and "status" not in crd
    (version,) = crd["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1", True, True)
    schema = version["schema"]["openAPIV3Schema"]
    assert schema["type"] == "object" and schema["properties"]["spec"]["type"] == "object"
    assert schema["properties"]["spec"]["properties"]["n"] == {"type": "integer"}
    assert version["subresources"] == {"status": {}}
    assert "creationTimestamp" not in crd["metadata"]


def test_printer_columns_move_into_the_version_with_v1_field_names() -> None:
    columns = [{"name": "State", "type": "string", "JSONPath": ".status.state"}]
    crd = convert.convert(old_crd(additionalPrinterColumns=columns))
    (version,) = crd["spec"]["versions"]
    assert version["additionalPrinterColumns"] == [
        {"name": "State", "type": "string", "jsonPath": ".status.state"}
    ]


def test_a_k8s_io_group_says_it_is_not_an_approved_api() -> None:
    annotations = convert.convert(old_crd())["metadata"]["annotations"]
    assert annotations[convert.APPROVAL].startswith("unapproved")


def test_only_v1beta1_crds_are_converted() -> None:
    with pytest.raises(ValueError, match="not a v1beta1 CRD"):
        convert.convert({**old_crd(), "apiVersion": "apiextensions.k8s.io/v1"})


def established(crd: Obj) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def module_crds() -> list[Path]:
    """The Spark operator module's own CRD files (the Go module proxy, cached by Go)."""
    env = {**os.environ, "PATH": f"/usr/local/go/bin:{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        ["go", "mod", "download", "-json", f"{MODULE}@{VERSION}"],
        capture_output=True, text=True, timeout=300, check=True, env=env, cwd="/",
    )  # fmt: skip
    directory = Path(json.loads(done.stdout)["Dir"])
    files = sorted((directory / "manifest" / "crds").glob("*.yaml"))
    assert files, f"{directory}: no CRDs under manifest/crds"
    return files


@pytest.fixture(scope="module")
def spark_crds(testbed: cluster.Cluster) -> Iterator[cluster.Cluster]:
    crds = [doc for path in module_crds() for doc in yaml.safe_load_all(path.read_text()) if doc]
    converted = yaml.safe_dump_all([convert.convert(c) for c in crds])
    testbed.kubectl("apply", "--server-side", "-f", "-", stdin=converted)

    def all_established() -> bool:
        base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        return all(
            established(testbed.admin.get(f"{base}/{name}.sparkoperator.k8s.io"))
            for name in ("sparkapplications", "scheduledsparkapplications")
        )

    waiting.until(all_established, timeout_s=60, what="the Spark operator's CRDs Established")
    yield testbed
    testbed.kubectl("delete", "-f", "-", "--wait=true", stdin=converted, timeout_s=120)


def test_our_spark_application_passes_the_operators_real_schema_whole(
    spark_crds: cluster.Cluster, testbed_namespace: str
) -> None:
    owner = specs.ObjectRef(
        kind="BrokerCluster", namespace=testbed_namespace, name="demo", uid="uid-1",
        generation=1, created="2026-11-27T10:00:00Z",
    )  # fmt: skip
    spec = specs.parse_audit(
        {"audit": {"enabled": True, "history": {"claimName": "audit-history"},
                   "spark": {"executorInstances": 2, "executorCores": 2,
                             "conf": {"spark.sql.shuffle.partitions": "4"}}}}
    )  # fmt: skip
    run = audits.RunInputs(
        name="demo-audit-1", scheduled_at="2026-11-27T10:00:00Z", brokers=("10.244.0.9:9877",),
        admin_token=specs.SecretKeyRef("demo-admin", "token"),
    )  # fmt: skip
    app = audits.spark_application(owner, spec, run)
    app["metadata"].pop("ownerReferences")  # the owner does not exist in a dry-run
    out = spark_crds.kubectl(
        "apply", "--dry-run=server", "-o", "json", "-f", "-", stdin=json.dumps(app)
    )
    accepted = json.loads(out)
    assert accepted["spec"] == app["spec"], "the apiserver pruned or changed fields"
