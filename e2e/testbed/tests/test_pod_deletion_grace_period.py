"""Pod deletion: SIGTERM first, SIGKILL when the grace period runs out, then the pod is gone."""

from __future__ import annotations

import time

import pytest
import testbed_manifests as m

from popfleet_testbed import processes, waiting
from popfleet_testbed.cluster import Cluster

pytestmark = pytest.mark.timeout(120)


def test_sigterm_ignoring_container_is_killed_after_grace(
    testbed: Cluster, testbed_namespace: str
) -> None:
    pod = m.pod(
        "stubborn", args=["serve"], restart_policy="Always", terminationGracePeriodSeconds=3
    )
    container = pod["spec"]["containers"][0]
    container["env"].append({"name": "IGNORE_SIGTERM", "value": "1"})
    container["readinessProbe"] = {"tcpSocket": {"port": 8080}, "periodSeconds": 1}
    testbed.apply(testbed_namespace, pod)
    [running] = testbed.wait_ready(testbed_namespace, "app=stubborn", 1)
    pid_file = testbed.pod_dir(running) / "containers" / "probe.pid"
    rec = processes.read_pid_file(pid_file)
    assert rec is not None
    assert processes.alive(rec)

    started = time.monotonic()
    testbed.kubectl("delete", "pod", "-n", testbed_namespace, "stubborn", "--wait=false")
    waiting.until(
        lambda: testbed.pod(testbed_namespace, "stubborn") is None,
        timeout_s=60,
        what="stubborn to be removed",
    )
    elapsed = time.monotonic() - started
    assert not processes.alive(rec)
    assert elapsed >= 2.5  # it outlived SIGTERM: the grace period had to run out
    assert "ignoring SIGTERM" in testbed.log(running)
