"""Static checks of e2e/kind (which needs Docker) that run everywhere, on the testbed.

``popfleet_crds`` makes sure the popfleet CRDs (and kopf's peering CRDs) exist on the
testbed apiserver, so custom resources can be dry-run: it installs the chart as the operator
tests do (release ``popfleet`` in ``popfleet-system``, so later installs adopt the kept CRDs)
with no operator replica, and uninstalls it afterwards. A release that already exists (a
reused testbed) is used as is and left alone.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from popfleet_testbed import cluster, errors
from popfleet_testbed.fixtures import testbed, testbed_namespace
from tests import eventloops
from tests.integration.monitoring.prometheus import tool

__all__ = ["testbed", "testbed_namespace"]

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "popfleet"
KIND = REPO / "e2e" / "kind"
RELEASE, RELEASE_NAMESPACE = "popfleet", "popfleet-system"
KUBE_VERSION = "1.33.13"  # the testbed's apiserver


def load(name: str) -> ModuleType:
    """A module of e2e/kind (scripts beside run.sh or in a folder of it, not a package)."""
    spec = importlib.util.spec_from_file_location(name.rsplit("/", 1)[-1], KIND / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _release_exists(testbed: cluster.Cluster) -> bool:
    try:
        testbed.helm("status", RELEASE, "-n", RELEASE_NAMESPACE)
    except errors.TestbedError:
        return False
    return True


@pytest.fixture(scope="package")
def popfleet_crds(testbed: cluster.Cluster) -> Iterator[cluster.Cluster]:
    if _release_exists(testbed):
        yield testbed
        return
    testbed.helm(
        "install", RELEASE, str(CHART), "-n", RELEASE_NAMESPACE, "--create-namespace",
        "--set", "replicaCount=0", "--wait", "--timeout", "120s",
        timeout_s=180,
    )  # fmt: skip
    testbed.kubectl(
        "wait", "--for=condition=Established", "crd",
        "-l", "app.kubernetes.io/part-of=popfleet", "--timeout=60s",
    )  # fmt: skip
    yield testbed
    # No hooks: nothing was created, and no operator runs to finalize anything.
    testbed.helm(
        "uninstall", RELEASE, "-n", RELEASE_NAMESPACE, "--no-hooks", "--wait", timeout_s=120
    )


@pytest.fixture(scope="package")
def monitoring_crds(testbed: cluster.Cluster) -> Iterator[cluster.Cluster]:
    """prometheus-operator's PodMonitor and PrometheusRule CRDs (``make monitoring-crds``) on
    the testbed apiserver, for dry-runs of the chart with its monitoring on (the kind values
    turn it on); CRDs this fixture added are deleted after the package."""
    crds = tool("POPFLEET_MONITORING_CRDS", "monitoring-crds")
    plurals = ("podmonitors", "prometheusrules")
    names = [f"{p}.monitoring.coreos.com" for p in plurals]
    present = [n for n in names if testbed.admin.get_or_none(_crd_path(n)) is not None]
    for plural in plurals:
        testbed.kubectl(
            "apply", "--server-side", "-f", str(crds / f"monitoring.coreos.com_{plural}.yaml")
        )
    testbed.kubectl("wait", "--for=condition=Established", "crd", *names, "--timeout=60s")
    yield testbed
    for name in names:
        if name not in present:  # leave a reused testbed as it was
            testbed.kubectl("delete", "crd", name, "--ignore-not-found")


def _crd_path(name: str) -> str:
    return f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"


@pytest.fixture
def main_thread_event_loop() -> Iterator[None]:
    """The official client wants a current event loop on the caller's thread (why:
    tests/eventloops.py)."""
    with eventloops.current_event_loop():
        yield
