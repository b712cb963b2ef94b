"""Readiness, liveness, exec and gRPC probes turn into pod conditions and restarts."""

from __future__ import annotations

from typing import Any

import pytest
import testbed_manifests as m

from popfleet_testbed import waiting
from popfleet_testbed.cluster import Cluster

pytestmark = pytest.mark.timeout(180)


def test_failing_readiness_probe_makes_pod_unready(
    testbed: Cluster, testbed_namespace: str
) -> None:
    testbed.apply(testbed_namespace, m.deployment("flip", 1))
    [pod] = testbed.wait_ready(testbed_namespace, "app=flip", 1)
    testbed.http(pod, "/ready?value=false", data=b"")
    name = pod["metadata"]["name"]
    waiting.until(
        lambda: not testbed.is_ready(testbed.pod(testbed_namespace, name)),
        timeout_s=30,
        what="pod to turn unready",
    )
    endpoints_ready = testbed.admin.get(
        f"/apis/apps/v1/namespaces/{testbed_namespace}/deployments/flip"
    )["status"].get("readyReplicas", 0)
    assert endpoints_ready in (0, 1)  # the controller may lag; the pod condition is what counts
    testbed.http(pod, "/ready?value=true", data=b"")
    testbed.wait_ready(testbed_namespace, "app=flip", 1)


def test_failing_liveness_probe_restarts_the_container(
    testbed: Cluster, testbed_namespace: str
) -> None:
    pod = m.pod("sick", args=["serve"], restart_policy="Always")
    pod["spec"]["containers"][0]["livenessProbe"] = {
        "httpGet": {"path": "/does-not-exist", "port": 8080},
        "periodSeconds": 1,
        "failureThreshold": 2,
    }
    testbed.apply(testbed_namespace, pod)

    def restarted() -> dict[str, Any] | None:
        got = testbed.pod(testbed_namespace, "sick")
        statuses = (got or {}).get("status", {}).get("containerStatuses") or []
        return dict(statuses[0]) if statuses and statuses[0]["restartCount"] >= 1 else None

    status = waiting.until(restarted, timeout_s=60, what="liveness failure to restart sick")
    assert status["lastState"]["terminated"]["exitCode"] == 0  # SIGTERM → the image exits 0
    # the evidence a restart leaves: the run before it, and the kubelet's line naming the pod
    got = testbed.pod(testbed_namespace, "sick")
    assert got is not None
    assert "stopped on SIGTERM" in testbed.log(got, previous=True)
    kubelet_log = (testbed.info.layout.logs / "kubelet.log").read_text()
    container = got["spec"]["containers"][0]["name"]
    assert f"{testbed.pod_dir(got).name}/{container}: livenessProbe failed" in kubelet_log


def test_exec_and_tcp_probes_gate_readiness(testbed: Cluster, testbed_namespace: str) -> None:
    pod = m.pod("gated", args=["serve"], restart_policy="Always")
    container = pod["spec"]["containers"][0]
    container["startupProbe"] = {"tcpSocket": {"port": 8080}, "periodSeconds": 1}
    # Ready only once the file exists in the pod's volume: the exec probe sees /data rewritten.
    container["readinessProbe"] = {
        "exec": {"command": ["test", "-f", "/data/ready-now"]},
        "periodSeconds": 1,
    }
    testbed.apply(testbed_namespace, pod)
    got = waiting.until(
        lambda: (
            (p := testbed.pod(testbed_namespace, "gated"))
            and (p.get("status", {}).get("containerStatuses") or [{}])[0].get("started")
            and p
        ),
        timeout_s=60,
        what="gated started",
    )
    assert not testbed.is_ready(testbed.pod(testbed_namespace, "gated"))
    testbed.http(got, "/file?path=ready-now", data=b"1")
    testbed.wait_ready(testbed_namespace, "app=gated", 1)


def test_grpc_health_probe_drives_readiness(testbed: Cluster, testbed_namespace: str) -> None:
    pod = m.pod("rpc", args=["serve"], restart_policy="Always")
    container = pod["spec"]["containers"][0]
    container["env"].append({"name": "GRPC_PORT", "value": "9090"})
    container["readinessProbe"] = {"grpc": {"port": 9090}, "periodSeconds": 1}
    testbed.apply(testbed_namespace, pod)
    [ready] = testbed.wait_ready(testbed_namespace, "app=rpc", 1)
    testbed.http(ready, "/ready?value=false", data=b"")  # the gRPC check answers NOT_SERVING
    waiting.until(
        lambda: not testbed.is_ready(testbed.pod(testbed_namespace, "rpc")),
        timeout_s=30,
        what="rpc to turn unready",
    )
