"""The testbed Node and its heartbeats: registration, status, Lease.

Why: the node-lifecycle controller taints and evicts a Node whose Lease is not renewed within
its grace period, and the scheduler only places pods on a Ready Node; a kubelet is, first of
all, this heartbeat. The Node advertises ``podenv.NODE_ALLOCATABLE``, InternalIP 127.0.0.1
(the apiserver dials that for ``kubectl logs``) and the log endpoint's port.

Cadence: Lease ``kube-node-lease/<node>`` renewed every ``LEASE_RENEW_S`` (duration
``LEASE_DURATION_S``), Node status (Ready + no pressure) patched every ``NODE_STATUS_S``.
"""

from __future__ import annotations

import os
import platform
import time
from typing import Any

from popfleet_testbed import errors, kube, podenv, runtime

Obj = dict[str, Any]

LEASE_RENEW_S = 10.0
LEASE_DURATION_S = 40
NODE_STATUS_S = 30.0
KUBELET_VERSION = "v1.33.13"


def _micro_now() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}Z"


class NodeAgent:
    def __init__(self, api: kube.Kube, *, name: str, kubelet_port: int) -> None:
        self.api = api
        self.name = name
        self.kubelet_port = kubelet_port
        self.uid = ""
        self.next_lease_mono = 0.0
        self.next_node_status_mono = 0.0
        self._started = runtime.now_rfc3339()

    def _node_status(self) -> Obj:
        now = runtime.now_rfc3339()

        def cond(kind: str, status: str, reason: str, message: str) -> Obj:
            return {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": now,
                "lastTransitionTime": self._started,
            }

        return {
            "capacity": dict(podenv.NODE_ALLOCATABLE),
            "allocatable": dict(podenv.NODE_ALLOCATABLE),
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "ok"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "ok"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "ok"),
                cond("Ready", "True", "KubeletReady", "popfleet process kubelet is posting"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": self.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.kubelet_port}},
            "nodeInfo": {
                "machineID": "popfleet-testbed",
                "systemUUID": "popfleet-testbed",
                "bootID": str(os.getpid()),
                "kernelVersion": platform.release(),
                "osImage": "popfleet process kubelet",
                "containerRuntimeVersion": "testbed://0.1.0",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }

    def register(self) -> None:
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "popfleet.io/testbed": "true",
        }
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": labels},
            "spec": {},
        }
        try:
            node = self.api.create("/api/v1/nodes", body)
        except errors.KubeError as exc:
            if exc.status != 409:
                raise
            node = self.api.patch(f"/api/v1/nodes/{self.name}", {"metadata": {"labels": labels}})
        self.uid = node["metadata"]["uid"]
        self.post_status()
        self.renew_lease()

    def post_status(self) -> None:
        self.api.patch(
            f"/api/v1/nodes/{self.name}/status",
            {"status": self._node_status()},
            content_type=kube.STRATEGIC,
        )
        self.next_node_status_mono = time.monotonic() + NODE_STATUS_S

    def renew_lease(self) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.name}"
        lease = self.api.get_or_none(path)
        spec = {
            "holderIdentity": self.name,
            "leaseDurationSeconds": LEASE_DURATION_S,
            "renewTime": _micro_now(),
        }
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": self.name,
                    "namespace": "kube-node-lease",
                    "ownerReferences": [
                        {
                            "apiVersion": "v1",
                            "kind": "Node",
                            "name": self.name,
                            "uid": self.uid,
                        }
                    ],
                },
                "spec": spec,
            }
            self.api.create(path.rsplit("/", 1)[0], body)
        else:
            lease["spec"].update(spec)
            self.api.put(path, lease)
        self.next_lease_mono = time.monotonic() + LEASE_RENEW_S

    def heartbeat(self) -> None:
        now = time.monotonic()
        if now >= self.next_lease_mono:
            self.renew_lease()
        if now >= self.next_node_status_mono:
            self.post_status()
