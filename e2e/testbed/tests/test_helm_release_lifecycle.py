"""helm install / upgrade / uninstall of a small chart against the testbed."""

from __future__ import annotations

from pathlib import Path

import pytest

from popfleet_testbed import waiting
from popfleet_testbed.cluster import Cluster

pytestmark = pytest.mark.timeout(240)

CHART = Path(__file__).parent / "charts" / "probe"
SELECTOR = "app.kubernetes.io/instance=rel"


def test_install_upgrade_uninstall(testbed: Cluster, testbed_namespace: str) -> None:
    ns = testbed_namespace
    testbed.helm("install", "rel", str(CHART), "-n", ns, "--wait", "--timeout", "90s")
    [pod] = testbed.wait_ready(ns, SELECTOR, 1)
    # The ConfigMap is both env (configMapKeyRef) and a volume mounted at /config.
    assert testbed.http(pod, "/file?path=greeting") == "hello"
    assert '"GREETING": "hello"' in testbed.http(pod, "/env")

    testbed.helm(
        "upgrade",
        "rel",
        str(CHART),
        "-n",
        ns,
        "--wait",
        "--timeout",
        "90s",
        "--set",
        "replicaCount=2",
        "--set",
        "greeting=bonjour",
    )
    pods = testbed.wait_ready(ns, SELECTOR, 2, timeout_s=90)
    assert all('"GREETING": "bonjour"' in testbed.http(p, "/env") for p in pods)
    assert "rel" in testbed.helm("list", "-n", ns, "-q")

    testbed.helm("uninstall", "rel", "-n", ns, "--wait", "--timeout", "90s")
    waiting.until(
        lambda: not testbed.pods(ns, SELECTOR), timeout_s=60, what="release pods to go away"
    )
    assert testbed.helm("list", "-n", ns, "-q").strip() == ""
