"""Operator tests on the local testbed: real kube-apiserver, real Helm, process kubelet.

``popfleet_release`` helm-installs charts/popfleet once per session (CRDs, the operator as
the chart's pod with the chart's RBAC). ``operator_log_clean`` checks after a test that the
operator wrote no traceback and no error outside the expected kinds.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from popfleet_testbed import cluster, waiting
from popfleet_testbed.fixtures import testbed, testbed_namespace
from tests.integration.operator import story

__all__ = ["testbed", "testbed_namespace"]

RELEASE_NAMESPACE = "popfleet-system"

# Lines the operator may log at ERROR level without anything being wrong.
EXPECTED_ERRORS = re.compile(
    r"failed temporarily"  # a TemporaryError: a retry with back-off, by design
    r"|storage is \(re\)initializing"  # the apiserver warming a new CRD's watch cache
    r"|is being terminated|namespaces \"[^\"]+\" not found"  # Events into a namespace going away
    r"|failed permanently: spec\."  # an InvalidSpec, reported as a condition (tested on purpose)
)


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
    (pod,) = testbed.pods(RELEASE_NAMESPACE, "app.kubernetes.io/name=popfleet-operator")
    return pod


def operator_log(testbed: cluster.Cluster) -> str:
    return testbed.log(operator_pod(testbed))


def restarts(pod: dict[str, Any]) -> int:
    return sum(int(s.get("restartCount", 0)) for s in pod["status"].get("containerStatuses", []))


def unexpected_errors(log: str) -> list[str]:
    lines = log.splitlines()
    bad = [
        line
        for line in lines
        if (" ERROR " in line or " CRITICAL " in line) and not EXPECTED_ERRORS.search(line)
    ]
    bad += [line for line in lines if line.startswith("Traceback")]
    return bad


@pytest.fixture
def operator_log_clean(popfleet_release: cluster.Cluster) -> Iterator[None]:
    """After the test: the same operator container (no crash, no restart), a clean log."""
    pod = operator_pod(popfleet_release)
    before = len(popfleet_release.log(pod))
    yield
    after = operator_pod(popfleet_release)
    assert after["metadata"]["uid"] == pod["metadata"]["uid"], "the operator pod was replaced"
    assert restarts(after) == restarts(pod), "the operator container restarted"
    new = popfleet_release.log(after)[before:]
    assert unexpected_errors(new) == [], new[-4000:]
