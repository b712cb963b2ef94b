"""Deleting a StatefulSet pod: SIGTERM, the pod comes back, and its claim's data is still there."""

from __future__ import annotations

import pytest
import testbed_manifests as m

from popfleet_testbed import waiting
from popfleet_testbed.cluster import Cluster

pytestmark = pytest.mark.timeout(180)


def test_deleted_pod_returns_with_its_claim_data(testbed: Cluster, testbed_namespace: str) -> None:
    testbed.apply(testbed_namespace, m.statefulset("keep", 1))
    [old] = testbed.wait_ready(testbed_namespace, "app=keep", 1)
    assert testbed.http(old, "/file?path=x.txt", data=b"survives") == "written"

    testbed.kubectl("delete", "pod", "-n", testbed_namespace, "keep-0", "--wait=false")

    def replaced() -> dict[str, object] | None:
        pod = testbed.pod(testbed_namespace, "keep-0")
        if pod and pod["metadata"]["uid"] != old["metadata"]["uid"] and testbed.is_ready(pod):
            return pod
        return None

    new = waiting.until(replaced, timeout_s=90, what="keep-0 to be replaced and Ready")
    assert testbed.http(new, "/file?path=x.txt") == "survives"
    # The old process got SIGTERM and stopped cleanly (the test image logs it).
    assert "stopped on SIGTERM" in testbed.log(old)
