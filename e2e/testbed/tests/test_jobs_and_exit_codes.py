"""Jobs run to completion; exit codes, restart policy and restart counts show in the status."""

from __future__ import annotations

from typing import Any

import pytest
import testbed_manifests as m

from popfleet_testbed import waiting
from popfleet_testbed.cluster import Cluster

pytestmark = pytest.mark.timeout(180)


def test_job_runs_to_completion(testbed: Cluster, testbed_namespace: str) -> None:
    template = m.pod("once", args=["exit", "--code", "0", "--write", "/data/done=1"])
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "once"},
        "spec": {"backoffLimit": 0, "template": {"spec": template["spec"]}},
    }
    testbed.apply(testbed_namespace, job)

    def complete() -> bool:
        got = testbed.admin.get(f"/apis/batch/v1/namespaces/{testbed_namespace}/jobs/once")
        return int(got.get("status", {}).get("succeeded", 0)) == 1

    waiting.until(complete, timeout_s=90, what="job once to succeed")
    [pod] = testbed.pods(testbed_namespace, "job-name=once")
    assert pod["status"]["phase"] == "Succeeded"
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")


def test_failing_container_never_restarted_reports_exit_code(
    testbed: Cluster, testbed_namespace: str
) -> None:
    testbed.apply(testbed_namespace, m.pod("fails", args=["exit", "--code", "3"]))
    pod = testbed.wait_phase(testbed_namespace, "fails", "Failed")
    status = pod["status"]["containerStatuses"][0]
    assert status["state"]["terminated"]["exitCode"] == 3
    assert status["restartCount"] == 0


def test_on_failure_restarts_count_up(testbed: Cluster, testbed_namespace: str) -> None:
    testbed.apply(
        testbed_namespace,
        m.pod("flaky", args=["exit", "--code", "1"], restart_policy="OnFailure"),
    )

    def restarted_twice() -> dict[str, Any] | None:
        pod = testbed.pod(testbed_namespace, "flaky")
        statuses = (pod or {}).get("status", {}).get("containerStatuses") or []
        if statuses and statuses[0]["restartCount"] >= 2:
            return dict(statuses[0])
        return None

    status = waiting.until(restarted_twice, timeout_s=60, what="flaky to restart twice")
    assert status["lastState"]["terminated"]["exitCode"] == 1
    assert status["lastState"]["terminated"]["reason"] == "Error"
