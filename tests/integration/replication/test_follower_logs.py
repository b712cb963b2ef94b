"""A follower built from a leader's frames (issue 18): the pure rules of
``popbroker.replication`` over real stores. Any frame size copies the leader's segment files
and epoch history; a deposed leader's frames are refused before anything is written; a
follower of a deposed leader cuts where the histories part and becomes the new leader's
copy; histories that share nothing are refused."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from popbroker.replication import stream
from popbroker.replication.rules import ReplicationRuleError
from popbroker.replicator.logs import FollowerLog, LeaderLog, history_of
from popbroker.store.api import FlushMode, TopicConfig
from popbroker.store.local import LocalStore
from tests.logtraffic import random_appends
from tests.storesettings import small_settings

SEGMENT = 8 * 1024
TOPICS = [TopicConfig("orders", 2, 2), TopicConfig("payments", 2, 2)]
CLOCK_MS = 1_700_000_000_000


async def _open(path: Path) -> LocalStore:
    settings = small_settings(
        segment_bytes=SEGMENT, flush_mode=FlushMode.SYNC, max_body_bytes=4096,
        max_properties_bytes=1024,
    )  # fmt: skip
    store = LocalStore.open(path, settings, clock=lambda: CLOCK_MS)
    for topic in TOPICS:
        await store.put_topic(topic)
    return store


async def _term(store: LocalStore, epoch: int, rng: random.Random, batches: int) -> None:
    """A leader's term: its epoch recorded at the log's end, then its appends."""
    store.record_epoch(epoch, store.commitlog.end)
    await random_appends(store, rng, batches, label=str(epoch), topics=TOPICS)


async def _replicate(follower: FollowerLog, leader: LeaderLog, rng: random.Random) -> int:
    frames = 0
    end = follower.state.end
    while True:
        frame = leader.frame(end, max_bytes=rng.choice([300, 2000, 9000]), commit_offset=end)
        if not frame.data and end < leader._store.commitlog.end:
            frame = leader.frame(end, max_bytes=SEGMENT, commit_offset=end)
        state = await follower.apply(frame)
        frames += 1
        if not frame.data:
            return frames
        end = state.end


def _segments(store: LocalStore) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((store.data_dir / "commitlog").iterdir())}


async def test_frames_of_any_size_copy_the_log_and_its_epochs(tmp_path: Path) -> None:
    leader_store, follower_store = await _open(tmp_path / "l"), await _open(tmp_path / "f")
    try:
        rng = random.Random(7)
        for epoch in (1, 2, 5):
            await _term(leader_store, epoch, rng, 12)
        leader = LeaderLog(leader_store, term=5)
        follower = FollowerLog(follower_store)
        frames = await _replicate(follower, leader, random.Random(8))
        assert frames > 10
        assert _segments(follower_store) == _segments(leader_store)
        assert follower_store.epochs() == leader_store.epochs()
        assert follower.state.term == 5

        stale = LeaderLog(leader_store, term=4).frame(
            follower.state.end, max_bytes=100, commit_offset=0
        )
        with pytest.raises(stream.Refused) as refused:
            await follower.apply(stale)
        assert refused.value.stale
        assert _segments(follower_store) == _segments(leader_store)
    finally:
        await leader_store.close()
        await follower_store.close()


async def test_a_follower_of_a_deposed_leader_becomes_the_new_leaders_copy(
    tmp_path: Path,
) -> None:
    """Terms 1-2 on the old leader, replicated to both others; the old leader then writes
    term 3 alone (isolated), while the new leader is elected for term 4 and writes. The
    old leader, back as a follower, cuts its term-3 bytes and copies the new leader."""
    old, new = await _open(tmp_path / "old"), await _open(tmp_path / "new")
    try:
        rng = random.Random(3)
        for epoch in (1, 2):
            await _term(old, epoch, rng, 10)
        await _replicate(FollowerLog(new), LeaderLog(old, term=2), random.Random(4))
        shared_end = old.commitlog.end
        await _term(old, 3, random.Random(5), 15)  # isolated, never acknowledged by SYNC
        await _term(new, 4, random.Random(6), 10)
        assert old.commitlog.end > shared_end + SEGMENT

        back = FollowerLog(old)
        start = await back.follow(history_of(new), leader_end=new.commitlog.end, term=4)
        assert start == shared_end
        assert [e for e, _ in old.epochs()] == [1, 2]
        await _replicate(back, LeaderLog(new, term=4), random.Random(7))
        assert _segments(old) == _segments(new)
        assert old.epochs() == new.epochs()
    finally:
        await old.close()
        await new.close()


async def test_histories_that_share_nothing_are_refused(tmp_path: Path) -> None:
    one, other = await _open(tmp_path / "one"), await _open(tmp_path / "other")
    try:
        await _term(one, 1, random.Random(1), 3)
        await _term(other, 2, random.Random(2), 3)
        before = _segments(one)
        with pytest.raises(ReplicationRuleError):
            await FollowerLog(one).follow(history_of(other), leader_end=other.commitlog.end, term=2)
        assert _segments(one) == before
    finally:
        await one.close()
        await other.close()
