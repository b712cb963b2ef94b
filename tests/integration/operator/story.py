"""Helpers for the operator's testbed tests: CR access, conditions, broker read-back.

Brokers are dialled on their pod IPs (loopback in the testbed), never on Service addresses.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from popfleet_api.client import BrokerAdmin
from popfleet_testbed import cluster, errors, kube, processes, waiting

RESYNC_S = 2
ADMIN_PORT = 9877
CRDS = Path(__file__).resolve().parents[3] / "crds"
CHART = Path(__file__).resolve().parents[3] / "charts" / "popfleet"
Obj = dict[str, Any]
T = TypeVar("T")

# Lines the operator may log at ERROR level without anything being wrong.
EXPECTED_ERRORS = re.compile(
    r"failed temporarily"  # a TemporaryError: a retry with back-off, by design
    r"|storage is \(re\)initializing"  # the apiserver warming a new CRD's watch cache
    r"|is being terminated|namespaces \"[^\"]+\" not found"  # Events into a namespace going away
    r"|failed permanently: spec\."  # an InvalidSpec, reported as a condition (tested on purpose)
)


def install_chart(
    tb: cluster.Cluster, *, release: str, namespace: str, values: tuple[str, ...] = ()
) -> None:
    """``helm upgrade --install`` charts/popfleet with the tests' short intervals, and wait."""
    sets = [
        f"operator.resyncIntervalSeconds={RESYNC_S}",
        "operator.adminTimeoutSeconds=2",
        *values,
    ]
    tb.helm(
        "upgrade", "--install", release, str(CHART), "-n", namespace, "--create-namespace",
        *(arg for value in sets for arg in ("--set", value)),
        "--wait", "--timeout", "120s", timeout_s=180,
    )  # fmt: skip


def operator_pod(tb: cluster.Cluster, namespace: str) -> Obj:
    (pod,) = tb.pods(namespace, "app.kubernetes.io/name=popfleet-operator")
    return pod


def restarts(pod: Obj) -> int:
    return sum(int(s.get("restartCount", 0)) for s in pod["status"].get("containerStatuses", []))


def unexpected_errors(log: str) -> list[str]:
    """ERROR/CRITICAL lines not in ``EXPECTED_ERRORS``, and tracebacks."""
    lines = log.splitlines()
    bad = [
        line
        for line in lines
        if (" ERROR " in line or " CRITICAL " in line) and not EXPECTED_ERRORS.search(line)
    ]
    bad += [line for line in lines if line.startswith("Traceback")]
    return bad


def brokers_cr(name: str, replicas: int) -> Obj:
    return {
        "apiVersion": "popfleet.io/v1alpha1",
        "kind": "BrokerCluster",
        "metadata": {"name": name},
        "spec": {"brokers": replicas, "storage": {"size": "64Mi"}},
    }


def topic_cr(name: str, cluster_name: str, *, queues: int = 4, policy: str = "Retain") -> Obj:
    return {
        "apiVersion": "popfleet.io/v1alpha1",
        "kind": "Topic",
        "metadata": {"name": name},
        "spec": {"clusterRef": {"name": cluster_name}, "queues": queues, "deletionPolicy": policy},
    }


def group_cr(name: str, cluster_name: str, topic: str, *, policy: str = "Retain") -> Obj:
    return {
        "apiVersion": "popfleet.io/v1alpha1",
        "kind": "ConsumerGroup",
        "metadata": {"name": name},
        "spec": {
            "clusterRef": {"name": cluster_name},
            "topics": [{"name": topic}],
            "consumeMode": "PULL",
            "deletionPolicy": policy,
        },
    }


def path(namespace: str, plural: str, name: str = "") -> str:
    return kube.ns_path(namespace, plural, name, group="popfleet.io/v1alpha1")


def get(tb: cluster.Cluster, namespace: str, plural: str, name: str) -> Obj | None:
    return tb.admin.get_or_none(path(namespace, plural, name))


def patch_spec(tb: cluster.Cluster, namespace: str, plural: str, name: str, spec: Obj) -> None:
    tb.admin.patch(path(namespace, plural, name), {"spec": spec}, content_type=kube.MERGE)


def condition(obj: Obj | None, type_: str) -> Obj:
    for found in ((obj or {}).get("status") or {}).get("conditions") or []:
        if found["type"] == type_:
            return dict(found)
    return {}


def wait_condition(
    tb: cluster.Cluster,
    namespace: str,
    plural: str,
    name: str,
    type_: str,
    *,
    status: str = "True",
    reason: str | None = None,
    timeout_s: float = 90,
    also: Callable[[Obj], bool] = lambda _: True,
) -> Obj:
    """Wait until the condition has ``status`` (and ``reason``) for the current generation."""

    def check() -> Obj | None:
        obj = get(tb, namespace, plural, name)
        if obj is None:
            return None
        found = condition(obj, type_)
        current = found.get("observedGeneration") == obj["metadata"]["generation"]
        if found.get("status") != status or not current:
            return None
        if reason is not None and found.get("reason") != reason:
            return None
        return obj if also(obj) else None

    try:
        return waiting.until(
            check, timeout_s=timeout_s, what=f"{plural}/{name} {type_}={status} {reason or ''}"
        )
    except errors.Timeout as exc:
        raise errors.Timeout(f"{exc}\n{snapshot(tb, namespace, plural, name)}") from exc


def snapshot(tb: cluster.Cluster, namespace: str, plural: str, name: str) -> str:
    """What a timed-out wait saw: the object's conditions, every pod's phase, conditions and
    node in the namespace (an unscheduled pod names its reason here), every claim's phase and
    volume, and the node."""
    obj = get(tb, namespace, plural, name) or {}
    lines = [f"{plural}/{name} conditions: {(obj.get('status') or {}).get('conditions')}"]
    for pod in tb.admin.items(f"/api/v1/namespaces/{namespace}/pods"):
        st = pod.get("status") or {}
        conds = [
            (c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
            for c in st.get("conditions") or []
        ]
        lines.append(
            f"pod {pod['metadata']['name']}: {st.get('phase')} ip={st.get('podIP')} "
            f"node={pod['spec'].get('nodeName')} {conds}"
        )
    for claim in tb.admin.items(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims"):
        annotations = claim["metadata"].get("annotations") or {}
        lines.append(
            f"claim {claim['metadata']['name']}: {(claim.get('status') or {}).get('phase')} "
            f"volume={claim['spec'].get('volumeName')} "
            f"selected-node={annotations.get('volume.kubernetes.io/selected-node')}"
        )
    for node in tb.admin.items("/api/v1/nodes"):
        ready = [c for c in node["status"].get("conditions") or [] if c.get("type") == "Ready"]
        taints = node["spec"].get("taints")
        lines.append(f"node {node['metadata']['name']}: {ready} taints={taints}")
    return "\n".join(lines)


def events(tb: cluster.Cluster, namespace: str, reason: str) -> str:
    return tb.kubectl("get", "events", "-n", namespace, "--field-selector", f"reason={reason}")


def wait_event(tb: cluster.Cluster, namespace: str, reason: str, text: str) -> None:
    """Wait for an Event with ``reason`` whose listing mentions ``text``."""
    waiting.until(
        lambda: text in events(tb, namespace, reason),
        timeout_s=30,
        what=f"a {reason} Event mentioning {text!r}",
    )


def broker_pods(tb: cluster.Cluster, namespace: str, cluster_name: str) -> list[Obj]:
    pods = tb.pods(namespace, f"popfleet.io/cluster={cluster_name}")
    return sorted(
        (p for p in pods if not p["metadata"].get("deletionTimestamp")),
        key=lambda p: p["metadata"]["name"],
    )


def on_broker(pod: Obj, call: Callable[[BrokerAdmin], Awaitable[T]]) -> T:
    """Run one admin call against ``pod``'s admin port (its loopback pod IP)."""
    endpoint = f"{cluster.Cluster.pod_ip(pod)}:{ADMIN_PORT}"

    async def run() -> T:
        async with BrokerAdmin(endpoint, timeout_s=5) as admin:
            return await call(admin)

    return asyncio.run(run())


def container_process(tb: cluster.Cluster, pod: Obj, container: str) -> processes.Recorded:
    recorded = processes.read_pid_file(tb.pod_dir(pod) / "containers" / f"{container}.pid")
    assert recorded is not None and processes.alive(recorded)
    return recorded


def freeze(recorded: processes.Recorded, *, frozen: bool) -> None:
    """SIGSTOP/SIGCONT a container process the test's own testbed started."""
    os.kill(recorded.pid, signal.SIGSTOP if frozen else signal.SIGCONT)
