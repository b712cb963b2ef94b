"""Operator tests on the local testbed: real kube-apiserver, real Helm, process kubelet.

``popfleet_release`` helm-installs charts/popfleet once per session (CRDs, the operator as
the chart's pod with the chart's RBAC). ``operator_log_clean`` checks after a test that the
operator wrote no traceback and no error outside the expected kinds.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from popfleet_testbed import cluster, waiting
from popfleet_testbed.fixtures import testbed, testbed_namespace
from tests.integration.operator import story

__all__ = ["testbed", "testbed_namespace"]

CHART = Path(__file__).resolve().parents[3] / "charts" / "popfleet"
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
    testbed.helm(
        "upgrade",
        "--install",
        "popfleet",
        str(CHART),
        "-n",
        RELEASE_NAMESPACE,
        "--create-namespace",
        "--set",
        f"operator.resyncIntervalSeconds={story.RESYNC_S}",
        "--set",
        "operator.adminTimeoutSeconds=2",
        "--wait",
        "--timeout",
        "120s",
        timeout_s=180,
    )
    yield testbed
    # With the operator still running, so that finalizers are honoured (Retain by default).
    testbed.kubectl(
        "delete", "consumergroups,topics,brokerclusters", "--all", "-A", "--timeout=120s",
        timeout_s=150,
    )  # fmt: skip
    testbed.helm("uninstall", "popfleet", "-n", RELEASE_NAMESPACE, "--wait", timeout_s=120)
    waiting.until(
        lambda: not testbed.admin.items("/api/v1/pods"),
        timeout_s=120,
        what="every pod of the operator tests gone",
    )


def operator_log(testbed: cluster.Cluster) -> str:
    (pod,) = testbed.pods(RELEASE_NAMESPACE, "app.kubernetes.io/name=popfleet-operator")
    return testbed.log(pod)


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
    before = len(operator_log(popfleet_release))
    yield
    new = operator_log(popfleet_release)[before:]
    assert unexpected_errors(new) == [], new[-4000:]
