"""The state outside the log over the replication connection (issue 18): topics, groups,
consume modes and committed offsets reach a follower; a config write on the leader is
answered only once the in-sync follower holds it on disk; a follower refuses every write
through its replica's store, and a leader's config writes wait for its followers."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from popbroker.replicator.facade import ReplicatedStore
from popbroker.replicator.replica import Replica
from popbroker.replicator.wire import Follower, Leader, SyncAppends
from popbroker.store.api import (
    ClusterMember,
    ConsumeMode,
    ConsumeModeConfig,
    GroupConfig,
    MessageToAppend,
    TopicConfig,
)
from popbroker.store.errors import NotEnoughReplicas, NotLeader
from popbroker.store.local import LocalStore
from tests.integration.replication.test_follower_logs import _open, _term
from tests.integration.replication.test_replication_wire import TOKEN, WAIT_S, _until


@dataclass
class Pair:
    leader_store: LocalStore
    follower_store: LocalStore
    leader: Leader
    follower: Follower
    running: asyncio.Task[None]

    async def until(self, done: Callable[[], bool]) -> None:
        await _until(self.follower, self.running, done)


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[Pair]:
    leader_store, follower_store = await _open(tmp_path / "l"), await _open(tmp_path / "f")
    leader = Leader(leader_store, term=1, token=TOKEN, heartbeat_s=0.05, state_interval_s=0.05)
    try:
        await _term(leader_store, 1, random.Random(7), 10)
        port = await leader.start("127.0.0.1", 0)
        follower = Follower(follower_store, name="f1", token=TOKEN)
        running = asyncio.create_task(follower.run("127.0.0.1", port))
        pair = Pair(leader_store, follower_store, leader, follower, running)
        yield pair
        pair.running.cancel()
        await asyncio.gather(pair.running, return_exceptions=True)
        follower_store = pair.follower_store
    finally:
        await leader.stop()
        await leader_store.close()
        await follower_store.close()


def _message(queue_id: int) -> MessageToAppend:
    return MessageToAppend(topic="orders", queue_id=queue_id, body=b"late", properties={})


def _config(store: LocalStore) -> dict[str, object]:
    raw = store.metadata.to_json()
    raw.pop("members")
    return raw


async def test_config_and_offsets_reach_the_follower(pair: Pair) -> None:
    leader, follower = pair.leader_store, pair.follower_store
    await follower.set_members([ClusterMember("broker-f", "10.0.0.2:8081")])
    await leader.put_topic(TopicConfig("audit", 4, 4))
    await leader.put_group(GroupConfig("billing", max_reconsume_times=3))
    await leader.put_consume_mode(ConsumeModeConfig("billing", "orders", ConsumeMode.POP, 2))
    await leader.commit_offset(group="billing", topic="orders", queue_id=1, queue_offset=4)
    await pair.until(lambda: _config(follower) == _config(leader))
    await pair.until(lambda: follower.offsets.offsets == leader.offsets.offsets)
    assert follower.metadata.epoch == leader.metadata.epoch
    assert (await follower.consume_mode(group="billing", topic="orders")) == ConsumeModeConfig(
        "billing", "orders", ConsumeMode.POP, 2
    )
    assert [m.broker_name for m in await follower.members()] == ["broker-f"]  # its own

    # a deleted topic goes with its consume queues and offsets, as on the leader
    assert any(key[0] == "orders" for key in follower._cqs)
    await leader.delete_topic("orders")
    await pair.until(lambda: "orders" not in follower.metadata.topics)
    assert not any(key[0] == "orders" for key in follower._cqs)
    await pair.until(lambda: follower.offsets.offsets == leader.offsets.offsets == {})

    # offsets keep moving after the first snapshot
    await leader.commit_offset(group="billing", topic="payments", queue_id=0, queue_offset=9)
    await pair.until(lambda: follower.offsets.get("billing", "payments", 0) == 9)


async def test_a_config_write_is_answered_once_the_in_sync_follower_holds_it(
    pair: Pair, tmp_path: Path
) -> None:
    appends = SyncAppends(pair.leader_store, pair.leader, min_in_sync=2, timeout_s=WAIT_S)
    appends.in_sync = ["f1"]
    await pair.until(lambda: _config(pair.follower_store) == _config(pair.leader_store))
    for i in range(10):
        await pair.leader_store.put_topic(TopicConfig(f"t{i}", 1, 1))
        await appends.config_replicated()
        # answered: the follower has it, in memory and in its config file on disk
        assert f"t{i}" in pair.follower_store.metadata.topics
        on_disk = json.loads((tmp_path / "f" / "config" / "metadata.json").read_text())
        assert f"t{i}" in {t["name"] for t in on_disk["topics"]}

    pair.running.cancel()  # the follower goes, still in the set: not acknowledged in time
    await asyncio.gather(pair.running, return_exceptions=True)
    slow = SyncAppends(pair.leader_store, pair.leader, min_in_sync=2, timeout_s=0.3)
    slow.in_sync = ["f1"]
    await pair.leader_store.put_group(GroupConfig("late"))
    with pytest.raises(NotEnoughReplicas, match="did not take config"):
        await slow.config_replicated()


async def test_a_restarted_follower_keeps_the_config_and_offsets(
    pair: Pair, tmp_path: Path
) -> None:
    await pair.leader_store.put_group(GroupConfig("billing"))
    await pair.leader_store.commit_offset(
        group="billing", topic="orders", queue_id=0, queue_offset=3
    )
    await pair.until(lambda: pair.follower_store.offsets.get("billing", "orders", 0) == 3)
    await pair.until(lambda: "billing" in pair.follower_store.metadata.groups)
    pair.running.cancel()
    await asyncio.gather(pair.running, return_exceptions=True)
    await pair.follower_store.close()
    reopened = LocalStore.open(tmp_path / "f", pair.follower_store.settings)
    try:
        assert "billing" in reopened.metadata.groups
        assert reopened.offsets.get("billing", "orders", 0) == 3
    finally:
        await reopened.close()


def _served(store: LocalStore, appends: SyncAppends | None) -> ReplicatedStore:
    replica = SimpleNamespace(
        store=store, name="f1", appends=appends, fenced_writes=0, leads_now=appends is not None
    )  # a leader within its renew deadline, or a follower
    return ReplicatedStore(cast(Replica, replica))


async def test_a_follower_refuses_every_write_and_serves_reads(pair: Pair) -> None:
    await pair.until(lambda: _config(pair.follower_store) == _config(pair.leader_store))
    served = _served(pair.follower_store, None)
    before = (_config(pair.follower_store), dict(pair.follower_store.offsets.offsets))
    writes = [
        served.put_topic(TopicConfig("x", 1, 1)),
        served.delete_topic("orders"),
        served.put_group(GroupConfig("g")),
        served.delete_group("g"),
        served.put_consume_mode(ConsumeModeConfig("g", "orders", ConsumeMode.POP, 1)),
        served.commit_offset(group="g", topic="orders", queue_id=0, queue_offset=1),
        served.delete_offsets("g"),
        served.append([]),
        served.append_records([]),
    ]
    for write in writes:
        with pytest.raises(NotLeader, match="does not lead"):
            await write
    assert cast(SimpleNamespace, served._replica).fenced_writes == len(writes)  # metrics
    assert (_config(pair.follower_store), dict(pair.follower_store.offsets.offsets)) == before
    assert [t.name for t in await served.topics()] == [
        t.name for t in await pair.leader_store.topics()
    ]
    await served.set_members([ClusterMember("broker-f", "10.0.0.2:8081")])  # each pod's own


async def test_a_leaders_config_writes_wait_for_its_in_sync_followers(pair: Pair) -> None:
    appends = SyncAppends(pair.leader_store, pair.leader, min_in_sync=2, timeout_s=WAIT_S)
    appends.in_sync = ["f1"]
    served = _served(pair.leader_store, appends)
    await served.put_topic(TopicConfig("audit", 2, 2))
    assert "audit" in pair.follower_store.metadata.topics
    await served.put_group(GroupConfig("billing"))
    assert "billing" in pair.follower_store.metadata.groups
    await served.put_consume_mode(ConsumeModeConfig("billing", "audit", ConsumeMode.POP, 1))
    assert ("billing", "audit") in pair.follower_store.metadata.modes
    await served.delete_topic("audit")
    assert "audit" not in pair.follower_store.metadata.topics
    appends.in_sync = []  # below minInSyncReplicas 2: refused before anything is written
    with pytest.raises(NotEnoughReplicas, match="1 in-sync replicas, 2 needed"):
        await served.put_group(GroupConfig("refused"))
    assert "refused" not in pair.leader_store.metadata.groups


async def test_a_new_leader_brings_offsets_past_its_queues_back_to_their_ends(
    pair: Pair,
) -> None:
    """The old leader's offsets may count records it never replicated (popped while their
    SYNC append waited): the follower taking over must deliver its own next records there."""
    follower = pair.follower_store
    pair.running.cancel()  # the leader goes on alone: its next records never reach the follower
    await asyncio.gather(pair.running, return_exceptions=True)
    ends = {q: (await follower.bounds("orders", q)).max_queue_offset for q in (0, 1)}
    await pair.leader_store.append([_message(q) for q in (0, 0, 1)])
    state = {
        "offsets": {
            "version": 1,
            "offsets": [
                ["billing", "orders", 0, ends[0] + 2],  # past the follower's end
                ["billing", "orders", 1, ends[1]],  # at it: kept
                ["billing", "payments", 0, 0],
                ["audit", "payments", 1, 7],  # a queue the follower holds nothing of
            ],
        }
    }
    await follower.apply_state(json.dumps(state).encode())
    moved = follower.clamp_offsets()
    assert {(m.group, m.topic, m.queue_id, m.queue_offset) for m in moved} == {
        ("billing", "orders", 0, ends[0] + 2),
        ("audit", "payments", 1, 7),
    }
    assert follower.offsets.get("billing", "orders", 0) == ends[0]
    assert follower.offsets.get("billing", "orders", 1) == ends[1]
    assert follower.offsets.get("billing", "payments", 0) == 0
    assert (
        follower.offsets.get("audit", "payments", 1)
        == (await follower.bounds("payments", 1)).max_queue_offset
    )
