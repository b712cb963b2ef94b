"""A planned hand-over of a broker set (issue 18; ``Replica.hand_over``, the admin API's
``HandOver``): three replicas in this process, their Lease on the testbed's kube-apiserver,
replication over loopback. The leader stops taking writes, waits until its successor holds
its log, config and committed offsets, and releases the Lease naming it; the successor leads
the next term at its next round (no lease time waited, and no other replica may take it
first), holding everything, in SYNC and in ASYNC mode. A successor that does not catch up in
time leaves the leader leading, taking writes again."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from popbroker.replication.handover import HandOverRefused
from popbroker.replicator.facade import ReplicatedStore
from popbroker.replicator.leases import SUCCESSOR_ANNOTATION
from popbroker.replicator.replica import Replica
from popbroker.store.api import GroupConfig, TopicConfig
from popbroker.store.errors import NotLeader
from popfleet_testbed import controlplane
from tests.integration.replication.reads import keys
from tests.integration.replication.test_failover_on_apiserver import (
    RETRY_MS,
    ROUNDS,
    Clock,
    _message,
    _replica,
)
from tests.integration.replication.test_follower_logs import _segments


async def _set(
    tmp_path: Path,
    *,
    api: client.CoordinationV1Api,
    namespace: str,
    clock: Clock,
    synchronous: bool = True,
) -> dict[str, Replica]:
    peers = {name: ("127.0.0.1", controlplane.free_port()) for name in "abc"}
    return {
        name: await _replica(
            name,
            tmp_path,
            api=api,
            namespace=namespace,
            peers=peers,
            clock=clock,
            synchronous=synchronous,
        )
        for name in "abc"
    }


async def _until_in_sync(replicas: dict[str, Replica], leader: str, clock: Clock) -> None:
    """Rounds of every replica (the leader first) until ``leader`` leads with the two
    others in its recorded in-sync set; at most ``ROUNDS``."""
    order = [leader, *sorted(set(replicas) - {leader})]
    for _ in range(ROUNDS):
        for name in order:
            await replicas[name].round()
        appends = replicas[leader].appends
        if appends is not None and sorted(appends.in_sync) == sorted(set(replicas) - {leader}):
            return
        await asyncio.sleep(0.05)  # the followers' connections move between rounds
        clock.ms += RETRY_MS
    raise AssertionError(f"{leader} did not lead with every other replica in sync")


async def _stop_all(replicas: dict[str, Replica]) -> None:
    for r in replicas.values():
        await r.stop()
        await r.store.close()


@pytest.mark.parametrize("synchronous", [True, False], ids=["SYNC", "ASYNC"])
async def test_a_hand_over_goes_to_the_successor_with_everything(
    api: client.CoordinationV1Api, testbed_namespace: str, tmp_path: Path, synchronous: bool
) -> None:
    clock = Clock()
    replicas = await _set(
        tmp_path, api=api, namespace=testbed_namespace, clock=clock, synchronous=synchronous
    )
    a, b, c = replicas["a"], replicas["b"], replicas["c"]
    served = ReplicatedStore(a)
    try:
        await _until_in_sync(replicas, "a", clock)
        for i in range(30):
            await served.append(_message(i))
        await served.put_topic(TopicConfig("late", 2, 2))
        await served.put_group(GroupConfig("billing", max_reconsume_times=3))
        await served.commit_offset(group="billing", topic="orders", queue_id=1, queue_offset=7)
        end = a.store.commitlog.end

        handing = asyncio.create_task(a.hand_over("c", timeout_s=10.0))
        for _ in range(1_000):  # until the hand-over has stopped the writes
            if not a.leads_now:
                break
            await asyncio.sleep(0)
        with pytest.raises(NotLeader):  # writes stop first
            await served.append(_message(99))
        assert await handing == ("c", 1)
        assert (a.leader, a.appends) == (None, None)
        lease = await api.read_namespaced_lease("broker-0", testbed_namespace)
        assert not lease.spec.holder_identity
        assert lease.metadata.annotations[SUCCESSOR_ANNOTATION] == "c"

        # the clock does not move: no lease time waited; b may not take it, c does
        assert (await b.round()).holder is None
        assert b.leader is None
        standing = await c.round()
        assert (standing.holder, standing.term, standing.serving) == ("c", 2, True)
        lease = await api.read_namespaced_lease("broker-0", testbed_namespace)
        assert SUCCESSOR_ANNOTATION not in (lease.metadata.annotations or {})

        # c held everything a had when writes stopped: nothing lost, nothing redelivered
        assert c.store.commitlog.end == end
        assert {str(i) for i in range(30)} <= await keys(c.store)
        assert "99" not in await keys(c.store)
        assert await c.store.topic("late") is not None
        assert await c.store.group("billing") is not None
        assert await c.store.committed_offset(group="billing", topic="orders", queue_id=1) == 7

        # a and b follow c; a's log was c's already (nothing to cut), and c takes writes
        await _until_in_sync(replicas, "c", clock)
        assert c.appends is not None
        await ReplicatedStore(c).append(_message(30))
        for _ in range(ROUNDS):
            if a.store.commitlog.end == c.store.commitlog.end == b.store.commitlog.end:
                break
            await asyncio.sleep(0.05)
        assert _segments(a.store) == _segments(c.store) == _segments(b.store)
        assert a.hand_overs == 1 and a.figures().hand_overs == 1
    finally:
        await _stop_all(replicas)


async def test_a_hand_over_that_cannot_happen_changes_nothing(
    api: client.CoordinationV1Api, testbed_namespace: str, tmp_path: Path
) -> None:
    clock = Clock()
    replicas = await _set(tmp_path, api=api, namespace=testbed_namespace, clock=clock)
    a, b = replicas["a"], replicas["b"]
    try:
        await _until_in_sync(replicas, "a", clock)
        await ReplicatedStore(a).append(_message(0))

        with pytest.raises(HandOverRefused) as refused:
            await b.hand_over(None)
        assert refused.value.reason == "NOT_LEADER"
        with pytest.raises(HandOverRefused) as refused:
            await a.hand_over("z")
        assert refused.value.reason == "NO_SUCCESSOR"
        assert "not an in-sync follower" in refused.value.message

        # b stops following: it can never catch up, so the hand-over times out
        await b._stop_following()
        await a.store.append(_message(1))  # a moves past what b holds
        with pytest.raises(HandOverRefused) as refused:
            await a.hand_over("b", timeout_s=0.3)
        assert refused.value.reason == "HAND_OVER_TIMEOUT" and refused.value.retriable
        assert a.leads_now  # writes resume: nothing changed
        lease = await api.read_namespaced_lease("broker-0", testbed_namespace)
        assert lease.spec.holder_identity == "a"
        assert SUCCESSOR_ANNOTATION not in (lease.metadata.annotations or {})
        assert a.hand_overs == 0

        # with no successor named, the in-sync follower furthest along (c) is chosen
        assert await a.hand_over(None, timeout_s=10.0) == ("c", 1)
    finally:
        await _stop_all(replicas)
