"""``controlplane.restart_apiserver``: a new kube-apiserver process on the same port, same state.

The operator's fault tests restart the API server mid-reconcile; this checks the helper does
what they rely on: the old process is gone, a new one answers on the same address, and the
objects stored before the restart are still there (etcd kept them).
"""

from __future__ import annotations

import pytest

from popfleet_testbed import controlplane, kube, processes
from popfleet_testbed.cluster import Cluster

pytestmark = [pytest.mark.timeout(120)]


def apiserver(testbed: Cluster) -> processes.Recorded:
    (pid_file,) = testbed.info.layout.pids.glob("*-kube-apiserver.pid")
    rec = processes.read_pid_file(pid_file)
    assert rec is not None
    return rec


def test_restart_keeps_objects_and_port(testbed: Cluster, testbed_namespace: str) -> None:
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "survivor"},
        "data": {"kept": "yes"},
    }
    testbed.admin.create(kube.ns_path(testbed_namespace, "configmaps"), config_map)
    before = apiserver(testbed)

    controlplane.restart_apiserver(testbed.info)

    after = apiserver(testbed)
    assert not processes.alive(before)
    assert processes.alive(after) and after.pid != before.pid
    # The admin client still dials the port in the kubeconfig: the same address answers.
    found = testbed.admin.get(kube.ns_path(testbed_namespace, "configmaps", "survivor"))
    assert found["data"] == {"kept": "yes"}
