"""A follower whose log ends before its leader's begins (issue 18): the leader's retention
took the head, so no replica holds those bytes and "catch up from 0" can never work. The
leader answers the follower's ask with where its log begins (``B``: the physical start,
each queue's first offset there, the epochs begun by then); the follower drops what it
holds (all of it below that start), begins its log there, and catches up from it.

Over real stores and a loopback connection: an empty follower (a new replica, a lost
disk) and a stale one (it held the head retention took); each ends a byte-for-byte copy
of the leader's segments from the start, with the same epochs, the same first and next
offset in every queue and the same messages read from them, and stays so across a
restart. A restart right after beginning, before any byte came, opens as begun.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from popbroker.replicator.logs import FollowerLog, LeaderLog
from popbroker.replicator.wire import Follower, Leader
from popbroker.store.api import FlushMode
from popbroker.store.local import LocalStore
from tests.integration.replication.test_follower_logs import (
    CLOCK_MS,
    SEGMENT,
    TOPICS,
    _replicate,
    _segments,
    _term,
)
from tests.integration.replication.test_replication_wire import TOKEN, _appends, _until
from tests.storesettings import small_settings

RETAINED = 3 * SEGMENT  # the leader keeps about this much log


async def _open(path: Path, *, retained: int = 0) -> LocalStore:
    settings = small_settings(
        segment_bytes=SEGMENT, flush_mode=FlushMode.SYNC, max_body_bytes=4096,
        max_properties_bytes=1024, cq_entries_per_file=16, retention_max_bytes=retained,
    )  # fmt: skip
    store = LocalStore.open(path, settings, clock=lambda: CLOCK_MS)
    for topic in TOPICS:
        await store.put_topic(topic)
    return store


async def _leader_past_its_head(path: Path) -> LocalStore:
    """A leader of two terms whose retention deleted its first segments."""
    store = await _open(path, retained=RETAINED)
    await _term(store, 1, random.Random(11), 40)
    await _term(store, 2, random.Random(12), 40)
    assert store.run_retention()
    assert store.commitlog.min_offset > 0
    return store


async def _queue_keys(store: LocalStore) -> dict[tuple[str, int], tuple[int, int, list[str]]]:
    """Per queue: its first and next offset and the keys of the messages read from it."""
    found = {}
    for topic in TOPICS:
        for queue_id in range(topic.write_queue_nums):
            bounds = await store.bounds(topic.name, queue_id)
            first, next_ = bounds.min_queue_offset, bounds.max_queue_offset
            keys, offset = [], first
            while offset < next_:
                read = await store.read(topic.name, queue_id, offset, max_count=32)
                if not read.messages:
                    break
                keys += [m.properties["UNIQ_KEY"] for m in read.messages]
                offset = read.messages[-1].queue_offset + 1
            found[(topic.name, queue_id)] = (first, next_, keys)
    return found


async def _same(follower: LocalStore, leader: LocalStore) -> None:
    assert follower.commitlog.min_offset == leader.commitlog.min_offset
    assert _segments(follower) == _segments(leader)
    assert follower.epochs() == leader.epochs()
    assert await _queue_keys(follower) == await _queue_keys(leader)


async def _follow_until_caught_up(store: LocalStore, leader: LocalStore, port: int) -> None:
    follower = Follower(store, name="f1", token=TOKEN)
    running = asyncio.create_task(follower.run("127.0.0.1", port))
    try:
        await _until(follower, running, lambda: follower.log.state.end == leader.commitlog.end)
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


async def test_an_empty_and_a_stale_follower_begin_where_the_leaders_log_begins(
    tmp_path: Path,
) -> None:
    leader_store = await _open(tmp_path / "l", retained=RETAINED)
    leader = Leader(leader_store, term=2, token=TOKEN, heartbeat_s=0.05)
    stale = await _open(tmp_path / "stale")
    try:
        port = await leader.start("127.0.0.1", 0)
        await _term(leader_store, 1, random.Random(21), 10)
        await _follow_until_caught_up(stale, leader_store, port)  # holds the head, then leaves
        held = stale.commitlog.end
        await _term(leader_store, 2, random.Random(22), 60)
        assert leader_store.run_retention()
        assert leader_store.commitlog.min_offset > held  # all the stale one holds is gone

        empty = await _open(tmp_path / "empty")
        for store in (empty, stale):
            await _follow_until_caught_up(store, leader_store, port)
            await _same(store, leader_store)
        await stale.close()

        await empty.close()  # a restart: recovery opens the log as begun
        empty = await _open(tmp_path / "empty")
        await _same(empty, leader_store)
        await _appends(leader_store, random.Random(23), 10)  # the leader writes on
        await _follow_until_caught_up(empty, leader_store, port)  # on from its end
        await _same(empty, leader_store)
        await empty.close()
    finally:
        await leader.stop()
        await leader_store.close()


async def test_a_follower_restarted_right_after_beginning_opens_as_begun(tmp_path: Path) -> None:
    leader = await _leader_past_its_head(tmp_path / "l")
    follower = await _open(tmp_path / "f")
    try:
        start, queues, epochs = leader.log_head()
        assert any(n % 16 for n in queues.values())  # queues beginning inside a queue file
        await follower.begin_log_at(start, queues, epochs)
        await follower.close()
        follower = await _open(tmp_path / "f")
        assert (follower.commitlog.min_offset, follower.commitlog.end) == (start, start)
        for (topic, queue_id), first in queues.items():
            bounds = await follower.bounds(topic, queue_id)
            assert (bounds.min_queue_offset, bounds.max_queue_offset) == (first, first)
        log = FollowerLog(follower)
        await _replicate(log, LeaderLog(leader, term=2), random.Random(5))
        await _same(follower, leader)
    finally:
        await follower.close()
        await leader.close()
