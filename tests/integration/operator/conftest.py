"""Operator tests on the local testbed: real kube-apiserver, real Helm, process kubelet.

``popfleet_release`` helm-installs charts/popfleet once for this package (CRDs, the operator
as the chart's pod with the chart's RBAC) and uninstalls it after (the chart's pre-delete
hook has the operator finalize every CR). ``operator_log_clean`` checks after a test that
the operator neither restarted nor wrote a traceback or an error outside the expected kinds
(``story.EXPECTED_ERRORS``).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

import pytest

from popfleet_testbed import cluster, errors, waiting
from popfleet_testbed.fixtures import testbed, testbed_namespace
from tests.integration.operator import story

__all__ = ["testbed", "testbed_namespace"]

RELEASE_NAMESPACE = "popfleet-system"


@pytest.fixture(scope="package")
def popfleet_release(testbed: cluster.Cluster) -> Iterator[cluster.Cluster]:
    """The chart installed for this package's tests, and gone (with every pod) after them.

    Package scope, not session: brokers and the operator should not keep running (and
    using CPU and ports) while later test trees of the same session run.
    """
    story.install_chart(testbed, release="popfleet", namespace=RELEASE_NAMESPACE)
    yield testbed
    # The chart's pre-delete hook has the operator finalize every CR before it goes.
    testbed.helm(
        "uninstall", "popfleet", "-n", RELEASE_NAMESPACE, "--wait", "--timeout", "240s",
        timeout_s=270,
    )  # fmt: skip
    waiting.until(
        lambda: not testbed.admin.items("/api/v1/pods"),
        timeout_s=120,
        what="every pod of the operator tests gone",
    )


def operator_pod(testbed: cluster.Cluster) -> dict[str, Any]:
    return story.operator_pod(testbed, RELEASE_NAMESPACE)


OPERATOR_LOG_LINES = 80


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test's report ends with the operator's last log lines: a CI run's testbed is
    gone when someone reads its output, and the log is what tells a late finalizer or a
    stuck round."""
    report: pytest.TestReport = yield
    testbed_ = getattr(item, "funcargs", {}).get("popfleet_release")
    if report.failed and isinstance(testbed_, cluster.Cluster):
        try:
            lines = testbed_.log(operator_pod(testbed_)).splitlines()[-OPERATOR_LOG_LINES:]
            shown = "\n".join(lines)
        except (errors.TestbedError, OSError, ValueError) as exc:  # evidence only
            shown = f"(operator log unavailable: {exc})"
        report.sections.append(
            (f"operator log ({report.when}), last {OPERATOR_LOG_LINES} lines", shown)
        )
    return report


def restart_evidence(testbed_: cluster.Cluster, pod: dict[str, Any]) -> str:
    """Why the operator container restarted: its last state (an exit code of its own, or the
    kubelet's signal after a failed liveness probe), the kubelet's lines about the pod, and
    the end of the run before the restart."""
    name = pod["metadata"]["name"]
    states = [s.get("lastState", {}) for s in pod["status"].get("containerStatuses", [])]
    kubelet_log = testbed_.info.layout.logs / "kubelet.log"
    try:
        kubelet = [line for line in kubelet_log.read_text(errors="replace").splitlines()
                   if name in line][-10:]  # fmt: skip
        previous = testbed_.log(pod, previous=True).splitlines()[-OPERATOR_LOG_LINES:]
    except OSError as exc:  # evidence only
        kubelet, previous = [f"(unavailable: {exc})"], []
    return "\n".join(
        ["the operator container restarted", f"last state: {states}", "kubelet:", *kubelet,
         f"the run before the restart, last {OPERATOR_LOG_LINES} lines:", *previous]
    )  # fmt: skip


@pytest.fixture
def operator_log_clean(popfleet_release: cluster.Cluster) -> Iterator[None]:
    """After the test: the same operator container (no crash, no restart), a clean log."""
    pod = operator_pod(popfleet_release)
    before = len(popfleet_release.log(pod))
    yield
    after = operator_pod(popfleet_release)
    assert after["metadata"]["uid"] == pod["metadata"]["uid"], "the operator pod was replaced"
    assert story.restarts(after) == story.restarts(pod), restart_evidence(popfleet_release, after)
    new = popfleet_release.log(after)[before:]
    assert story.unexpected_errors(new) == [], new[-4000:]
