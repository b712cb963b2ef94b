"""The in-sync set, end to end (issue 18): a leader on the testbed's
kube-apiserver Lease with two followers over loopback. Both join the set and a SYNC append
(minInSyncReplicas 2) waits for both; one follower goes; while the shrink is only proposed
an append still waits for it (and times out: nothing is acknowledged by fewer copies than
the recorded set); once a round has recorded the shrink on the Lease, appends are
acknowledged by the remaining follower."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from popbroker.replication.insync import InSyncSet
from popbroker.replicator.duty import LeaderDuty
from popbroker.replicator.leases import LeaseCoordinator
from popbroker.replicator.wire import Follower, Leader, SyncAppends
from popbroker.store.api import MessageToAppend
from popbroker.store.errors import NotEnoughReplicas
from tests.integration.replication.test_follower_logs import _open

TOKEN = b"set-secret"
LAG_MS = 10_000
WAIT_S = 30.0


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def _message(i: int) -> list[MessageToAppend]:
    return [MessageToAppend(topic="orders", queue_id=0, body=b"m%d" % i, properties={})]


async def test_a_shrink_is_on_the_lease_before_fewer_copies_acknowledge(
    api: client.CoordinationV1Api, testbed_namespace: str, tmp_path: Path
) -> None:
    clock = Clock()
    store_a, store_b, store_c = [await _open(tmp_path / n) for n in "abc"]
    leader = Leader(store_a, term=1, token=TOKEN, heartbeat_s=0.05)
    coordinator = LeaseCoordinator(
        api, namespace=testbed_namespace, name="broker-0", me="a", lease_ms=15_000,
        renew_deadline_ms=12_000, retry_ms=1_000, clock_ms=clock,
    )  # fmt: skip
    insync = InSyncSet(leader="a", max_lag_ms=LAG_MS, clock_ms=clock)
    appends = SyncAppends(store_a, leader, min_in_sync=2, timeout_s=WAIT_S)
    duty = LeaderDuty(
        store_a, leader=leader, coordinator=coordinator, insync=insync, appends=appends
    )
    tasks: dict[str, asyncio.Task[None]] = {}
    try:
        assert (await duty.round()).serving  # term 1, the set {a}: too small for SYNC
        store_a.record_epoch(1, 0)
        with pytest.raises(NotEnoughReplicas, match="1 in-sync replicas, 2 needed"):
            await appends.append(_message(0))
        port = await leader.start("127.0.0.1", 0)
        for name, store in (("b", store_b), ("c", store_c)):
            follower = Follower(store, name=name, token=TOKEN)
            tasks[name] = asyncio.create_task(follower.run("127.0.0.1", port))
        async with leader.ack_progress:  # both connected and caught up (heartbeats ack)
            await asyncio.wait_for(
                leader.ack_progress.wait_for(lambda: {"b", "c"} <= set(leader.acked)), WAIT_S
            )
        await duty.round()
        assert appends.in_sync == ["b", "c"]
        (done,) = await appends.append(_message(1))
        for store in (store_b, store_c):  # answered: both followers hold it
            assert store.commitlog.end >= done.physical_offset + done.size

        tasks.pop("c").cancel()  # c goes; b keeps acknowledging (heartbeats)
        clock.ms += LAG_MS + 1_000
        async with leader.ack_progress:  # b's next acknowledgement: b caught up, c silent
            await asyncio.wait_for(
                leader.ack_progress.wait_for(
                    lambda: insync.proposal(commit=0, epoch_start=0) == {"a", "b"}
                ),
                WAIT_S,
            )
        quick = SyncAppends(store_a, leader, min_in_sync=2, timeout_s=0.5)
        quick.in_sync, quick.counted = appends.in_sync, appends.counted
        with pytest.raises(NotEnoughReplicas):  # proposed {a, b} is not on the Lease yet
            await quick.append(_message(2))
        await duty.round()  # records {a, b}
        lease = await api.read_namespaced_lease("broker-0", testbed_namespace)
        assert lease.metadata.annotations["popfleet.io/in-sync"] == "a,b"
        assert appends.in_sync == ["b"]
        (done,) = await appends.append(_message(3))
        assert store_b.commitlog.end >= done.physical_offset + done.size
    finally:
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        await leader.stop()
        for store in (store_a, store_b, store_c):
            await store.close()
