"""A container's environment, the way the kubelet builds it; plus the downward API values.

Why: in-cluster code (the operator, the brokers) learns who and where it is from env vars
(``POD_NAME``, ``POD_IP``, ``KUBERNETES_SERVICE_HOST``, ...) and ConfigMap/Secret references.
The process kubelet must build exactly that environment or the code under test takes paths it
never takes in a cluster.

Order (later wins, as in the kubelet): testbed variables, ``KUBERNETES_SERVICE_*``,
``envFrom`` sources in order, then ``env`` entries in order, each value ``$(VAR)``-expanded
against what is defined so far. Differences from a real kubelet, on purpose:

- ``KUBERNETES_SERVICE_HOST/PORT`` point at the apiserver on 127.0.0.1, not the ClusterIP;
- no docker-link style ``<SVC>_SERVICE_HOST`` variables for other Services: their ClusterIPs
  route nowhere and nothing may dial them;
- ``POPFLEET_TESTBED_ROOT`` (the pod's path root, see ``volumes``) and
  ``POPFLEET_SERVICEACCOUNT_DIR`` (the projected token directory) are added, and ``KUBECONFIG``
  points at a per-pod kubeconfig built from the pod's own service-account token.

The module is pure: ConfigMaps and Secrets come through the ``Sources`` protocol.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, Protocol

from kubernetes.utils.quantity import parse_quantity  # type: ignore[import-untyped]

from popfleet_testbed import errors, images

Obj = dict[str, Any]

# What the Node advertises; also the default for resourceFieldRef limits that are unset.
NODE_ALLOCATABLE = {"cpu": "8", "memory": "32Gi", "ephemeral-storage": "100Gi", "pods": "250"}


class Sources(Protocol):
    """Read access to the objects a pod may reference (None when absent)."""

    def configmap(self, namespace: str, name: str) -> Obj | None: ...

    def secret(self, namespace: str, name: str) -> Obj | None: ...


def configmap_data(cm: Obj) -> dict[str, bytes]:
    data = {k: str(v).encode() for k, v in (cm.get("data") or {}).items()}
    data.update({k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()})
    return data


def secret_data(secret: Obj) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}


def _source(sources: Sources, namespace: str, *, kind: str, name: str) -> dict[str, bytes] | None:
    if kind == "configMap":
        cm = sources.configmap(namespace, name)
        return configmap_data(cm) if cm is not None else None
    secret = sources.secret(namespace, name)
    return secret_data(secret) if secret is not None else None


_LABEL_REF = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def field_value(pod: Obj, field_path: str, *, pod_ip: str) -> str:
    """The value of a downward API ``fieldRef.fieldPath``."""
    meta, spec = pod.get("metadata", {}), pod.get("spec", {})
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": "127.0.0.1",
        "status.hostIPs": "127.0.0.1",
    }
    if field_path in simple:
        return str(simple[field_path])
    m = _LABEL_REF.match(field_path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    if field_path in ("metadata.labels", "metadata.annotations"):
        entries = meta.get(field_path.split(".")[1]) or {}
        return "\n".join(f'{k}="{v}"' for k, v in sorted(entries.items()))
    raise errors.TestbedError(f"unsupported fieldRef {field_path!r}")


def resource_value(container: Obj, ref: Obj) -> str:
    """A ``resourceFieldRef`` value: ``limits.cpu`` etc., rounded up in ``divisor`` units."""
    kind, _, resource = str(ref["resource"]).partition(".")
    resources = container.get("resources") or {}
    raw = (resources.get(kind) or {}).get(resource)
    if raw is None and kind == "limits":
        raw = NODE_ALLOCATABLE.get(resource)
    if raw is None:
        raw = "0"
    divisor = parse_quantity(str(ref.get("divisor") or "1"))
    value: Decimal = parse_quantity(str(raw)) / divisor
    return str(math.ceil(value))


def container_env(
    pod: Obj,
    container: Obj,
    *,
    sources: Sources,
    pod_ip: str,
    api_port: int,
    base: Mapping[str, str],
) -> dict[str, str]:
    """The full environment; raises ``NotReadyYet`` for a missing non-optional reference."""
    namespace = pod["metadata"]["namespace"]
    env: dict[str, str] = dict(base)
    env.update(
        {
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(api_port),
            "KUBERNETES_SERVICE_PORT_HTTPS": str(api_port),
            "KUBERNETES_PORT": f"tcp://127.0.0.1:{api_port}",
            "HOSTNAME": pod["spec"].get("hostname") or pod["metadata"]["name"],
        }
    )
    for src in container.get("envFrom") or []:
        kind = "configMap" if "configMapRef" in src else "secret"
        ref = src.get("configMapRef") or src.get("secretRef") or {}
        data = _source(sources, namespace, kind=kind, name=ref["name"])
        if data is None:
            if ref.get("optional"):
                continue
            raise errors.NotReadyYet(f"{kind} {namespace}/{ref['name']} not found")
        prefix = src.get("prefix", "")
        for key, value in data.items():
            env[prefix + key] = value.decode(errors="replace")
    for item in container.get("env") or []:
        name = item["name"]
        if "valueFrom" not in item:
            env[name] = images.expand(str(item.get("value", "")), env)
            continue
        vf = item["valueFrom"]
        if "fieldRef" in vf:
            env[name] = field_value(pod, vf["fieldRef"]["fieldPath"], pod_ip=pod_ip)
        elif "resourceFieldRef" in vf:
            env[name] = resource_value(container, vf["resourceFieldRef"])
        else:
            kind = "configMap" if "configMapKeyRef" in vf else "secret"
            ref = vf.get("configMapKeyRef") or vf.get("secretKeyRef") or {}
            data = _source(sources, namespace, kind=kind, name=ref["name"])
            if data is None or ref["key"] not in data:
                if ref.get("optional"):
                    continue
                raise errors.NotReadyYet(f"{kind} {namespace}/{ref['name']} key {ref['key']}")
            env[name] = data[ref["key"]].decode(errors="replace")
    return env
