"""``wakeups.lease_changed``: a set Lease's new leader, term or in-sync set wakes its
BrokerCluster (one annotation patch); renewals that change none of those cost no API call."""

from __future__ import annotations

import copy
from typing import Any, cast

import kopf

from popfleet_operator.clients import kube as kube_client
from popfleet_operator.clients.brokers import BrokerPool
from popfleet_operator.handlers import runtime, wakeups
from popfleet_operator.model import names

CLUSTER_URL = "/apis/popfleet.io/v1alpha1/namespaces/ns/brokerclusters/rep"
LEASES_URL = "/apis/coordination.k8s.io/v1/namespaces/ns/leases"


def lease(holder: str, term: int, in_sync: str, *, renewed: str = "t0") -> dict[str, Any]:
    return {
        "metadata": {
            "name": "rep-0",
            "namespace": "ns",
            "labels": {names.LABEL_CLUSTER: "rep"},
            "annotations": {names.TERM_ANNOTATION: str(term), names.IN_SYNC_ANNOTATION: in_sync},
        },
        "spec": {"holderIdentity": holder, "renewTime": renewed},
    }


class LeaseKube(kube_client.Kube):
    """The BrokerCluster ``rep`` and its one set Lease in memory; every call recorded."""

    def __init__(self) -> None:
        super().__init__(api=None)
        self.cluster: dict[str, Any] = {"metadata": {"name": "rep", "annotations": {}}}
        self.lease = lease("rep-0", 1, "rep-0,rep-r1-0")
        self.calls: list[str] = []

    async def get_or_none(self, url: str) -> dict[str, Any] | None:
        self.calls.append(f"GET {url}")
        return copy.deepcopy(self.cluster) if url == CLUSTER_URL else None

    async def items(self, url: str, *, label_selector: str = "") -> list[dict[str, Any]]:
        self.calls.append(f"LIST {url} {label_selector}")
        assert url == LEASES_URL and label_selector == f"{names.LABEL_CLUSTER}=rep"
        return [copy.deepcopy(self.lease)]

    async def patch_merge(self, url: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(f"PATCH {url}")
        assert url == CLUSTER_URL
        self.cluster["metadata"]["annotations"].update(patch["metadata"]["annotations"])
        return self.cluster


async def event(rt: runtime.Runtime, body: dict[str, Any], kind: str = "MODIFIED") -> None:
    handler: Any = wakeups.lease_changed  # the function under kopf's decorator
    await handler(
        type=kind, body=cast(kopf.Body, body), namespace="ns",
        labels=cast(kopf.Labels, body["metadata"]["labels"]), memo={"runtime": rt},
    )  # fmt: skip


async def test_a_new_in_sync_set_or_leader_patches_and_a_renewal_does_nothing() -> None:
    kube = LeaseKube()
    rt = runtime.Runtime(kube=kube, pool=BrokerPool(cast(Any, None)))
    await event(rt, kube.lease)  # first sight (an operator start): the cluster is checked
    first = kube.cluster["metadata"]["annotations"][names.LEASES]
    assert kube.calls[-1] == f"PATCH {CLUSTER_URL}"

    kube.calls.clear()
    await event(rt, lease("rep-0", 1, "rep-0,rep-r1-0", renewed="t1"))  # a renewal
    assert kube.calls == []

    kube.lease = lease("rep-0", 1, "rep-0,rep-r1-0,rep-r2-0")  # a follower caught up
    await event(rt, kube.lease)
    second = kube.cluster["metadata"]["annotations"][names.LEASES]
    assert second != first and kube.calls[-1] == f"PATCH {CLUSTER_URL}"

    kube.lease = lease("rep-r1-0", 2, "rep-r1-0,rep-r2-0")  # a failover
    await event(rt, kube.lease)
    assert kube.cluster["metadata"]["annotations"][names.LEASES] not in (first, second)


async def test_an_unchanged_fingerprint_is_not_written_again_and_deletion_forgets() -> None:
    kube = LeaseKube()
    rt = runtime.Runtime(kube=kube, pool=BrokerPool(cast(Any, None)))
    await event(rt, kube.lease)
    rt.leases.clear()  # an operator restart: its memory is gone, the annotation is not
    kube.calls.clear()
    await event(rt, kube.lease)
    assert [c.split()[0] for c in kube.calls] == ["GET", "LIST"]  # no patch: same value
    await event(rt, kube.lease, kind="DELETED")
    assert rt.leases == {}


async def test_a_cluster_being_deleted_is_not_patched() -> None:
    kube = LeaseKube()
    kube.cluster["metadata"]["deletionTimestamp"] = "2026-12-06T00:00:00Z"
    rt = runtime.Runtime(kube=kube, pool=BrokerPool(cast(Any, None)))
    await event(rt, kube.lease)
    assert [c.split()[0] for c in kube.calls] == ["GET"]
