"""Deployments and StatefulSets of the test image run as processes and become Ready."""

from __future__ import annotations

import pytest
import testbed_manifests as m

from popfleet_testbed import waiting
from popfleet_testbed.cluster import Cluster

pytestmark = pytest.mark.timeout(180)


def test_deployment_pods_run_ready_and_serve_on_their_loopback_ip(
    testbed: Cluster, testbed_namespace: str
) -> None:
    testbed.apply(testbed_namespace, m.deployment("web", 2))
    pods = testbed.wait_ready(testbed_namespace, "app=web", 2)
    ips = {p["status"]["podIP"] for p in pods}
    assert len(ips) == 2
    assert all(ip.startswith("127.") for ip in ips)
    for pod in pods:
        assert testbed.http(pod, "/healthz") == "ok"
        env = testbed.http(pod, "/env")
        assert f'"POD_NAME": "{pod["metadata"]["name"]}"' not in env  # not requested
        assert '"KUBERNETES_SERVICE_HOST": "127.0.0.1"' in env


def test_statefulset_reaches_ready_with_bound_claims(
    testbed: Cluster, testbed_namespace: str
) -> None:
    testbed.apply(testbed_namespace, m.statefulset("db", 2))
    pods = testbed.wait_ready(testbed_namespace, "app=db", 2)
    assert sorted(p["metadata"]["name"] for p in pods) == ["db-0", "db-1"]
    claims = testbed.admin.items(f"/api/v1/namespaces/{testbed_namespace}/persistentvolumeclaims")
    assert {c["metadata"]["name"]: c["status"]["phase"] for c in claims} == {
        "data-db-0": "Bound",
        "data-db-1": "Bound",
    }


def test_scale_up_and_down(testbed: Cluster, testbed_namespace: str) -> None:
    testbed.apply(testbed_namespace, m.deployment("scaled", 1))
    testbed.wait_ready(testbed_namespace, "app=scaled", 1)
    testbed.kubectl("scale", "-n", testbed_namespace, "deployment/scaled", "--replicas=3")
    testbed.wait_ready(testbed_namespace, "app=scaled", 3)
    testbed.kubectl("scale", "-n", testbed_namespace, "deployment/scaled", "--replicas=1")
    testbed.wait_ready(testbed_namespace, "app=scaled", 1)
    waiting.until(
        lambda: len(testbed.pods(testbed_namespace, "app=scaled")) == 1,
        timeout_s=60,
        what="scaled-down pods to be deleted",
    )
