"""``controlplane.restart_apiserver``: a new kube-apiserver process on the same port, same state.

The operator's fault tests restart the API server mid-reconcile; this checks the helper does
what they rely on: the old process is gone, a new one answers on the same address, and the
objects stored before the restart are still there (etcd kept them), and the process kubelet,
which calls the apiserver every half second, rode out the gap (it used to die of urllib3's
``MaxRetryError``) and still heartbeats.
"""

from __future__ import annotations

import pytest

from popfleet_testbed import controlplane, kube, processes, waiting
from popfleet_testbed.cluster import Cluster

pytestmark = [pytest.mark.timeout(120)]


def component(testbed: Cluster, name: str) -> processes.Recorded:
    (pid_file,) = testbed.info.layout.pids.glob(f"*-{name}.pid")
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
    node = testbed.info.node_name
    testbed.admin.create(kube.ns_path(testbed_namespace, "configmaps"), config_map)
    before = component(testbed, "kube-apiserver")
    kubelet = component(testbed, "kubelet")
    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}"

    controlplane.restart_apiserver(testbed.info)

    renewed_before = testbed.admin.get(lease_path)["spec"]["renewTime"]

    after = component(testbed, "kube-apiserver")
    assert not processes.alive(before)
    assert processes.alive(after) and after.pid != before.pid
    # The admin client still dials the port in the kubeconfig: the same address answers.
    found = testbed.admin.get(kube.ns_path(testbed_namespace, "configmaps", "survivor"))
    assert found["data"] == {"kept": "yes"}
    assert processes.alive(kubelet), "the kubelet died while the apiserver was away"
    waiting.until(
        lambda: testbed.admin.get(lease_path)["spec"]["renewTime"] != renewed_before,
        timeout_s=30,
        what="the kubelet renewing its Lease again after the restart",
    )
