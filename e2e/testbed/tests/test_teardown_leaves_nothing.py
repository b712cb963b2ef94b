"""A second, private testbed comes up with a pod and goes down leaving no process behind."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import testbed_manifests as m

from popfleet_testbed import cluster, controlplane, netguard
from popfleet_testbed.cluster import Cluster

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


def test_up_then_down_leaves_no_process(testbed: Cluster) -> None:
    run_dir = Path(tempfile.mkdtemp(prefix="popfleet-testbed-teardown-"))
    info = controlplane.up(run_dir, node_name="teardown-node", bins=testbed.info.binaries)
    second = cluster.Cluster(info)
    try:
        assert info.api_port != testbed.info.api_port
        ns = second.new_namespace()
        second.apply(ns, m.deployment("web", 1))
        second.wait_ready(ns, "app=web", 1)
        pids = netguard.testbed_pids(run_dir)
        assert len(pids) >= 6  # etcd, apiserver, kcm, scheduler, kubelet, the pod
    finally:
        second.close()
        controlplane.down(run_dir)
    left = [pid for pid in pids if os.path.exists(f"/proc/{pid}") and not _zombie(pid)]
    assert left == []
    assert not run_dir.exists()


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"
