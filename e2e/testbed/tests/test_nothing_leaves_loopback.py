"""No testbed process (control plane, kubelet, pods) holds a connection off loopback."""

from __future__ import annotations

import os

import pytest
import testbed_manifests as m

from popfleet_testbed import netguard
from popfleet_testbed.cluster import Cluster

pytestmark = pytest.mark.timeout(120)


def test_every_testbed_connection_is_loopback(testbed: Cluster, testbed_namespace: str) -> None:
    # Traffic of every kind: API watches, probes, a pod's own API calls.
    testbed.apply(testbed_namespace, m.deployment("net", 2))
    pods = testbed.wait_ready(testbed_namespace, "app=net", 2)
    for pod in pods:
        testbed.http(pod, "/healthz")
    pids = netguard.testbed_pids(testbed.info.run_dir)
    conns = netguard.connections(pids | {os.getpid()})
    assert len(pids) >= 7  # etcd, apiserver, kcm, scheduler, kubelet, 2 pods
    assert conns, "expected live connections to inspect"
    off = [c for c in conns if not netguard.is_loopback(c.remote_ip)]
    assert off == []
    # Nothing even listens beyond loopback (control plane, kubelet log endpoint, pods).
    assert netguard.exposed_listeners(pids) == []
    # And the pods' addresses are all loopback ones.
    assert all(m_ip.startswith("127.") for m_ip in (p["status"]["podIP"] for p in pods))
