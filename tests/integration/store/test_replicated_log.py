"""A follower's log rebuilt from its leader's bytes (issue 18): any split
of the leader's log into ``read_log`` pieces, applied with ``append_replicated``, gives a
follower whose segment files are the leader's byte for byte and whose queues read the same
messages; bad bytes are refused and change nothing; a restarted follower goes on."""

from __future__ import annotations

import random
import shutil
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from popbroker.store import format as fmt
from popbroker.store.api import FlushMode, MessageToAppend, TopicConfig
from popbroker.store.errors import InvalidArgument
from popbroker.store.local import LocalStore
from popbroker.store.settings import StoreSettings
from tests.logtraffic import random_appends
from tests.storesettings import small_settings

SEGMENT = 8 * 1024  # small: records of 100-1,500 bytes leave fillers and short tails
TOPICS = [TopicConfig("orders", 4, 4), TopicConfig("payments", 2, 2)]


def _settings(mode: FlushMode = FlushMode.SYNC) -> StoreSettings:
    return small_settings(
        segment_bytes=SEGMENT, flush_mode=mode, max_body_bytes=4096, max_properties_bytes=1024
    )


async def _open(path: Path, mode: FlushMode = FlushMode.SYNC) -> LocalStore:
    store = LocalStore.open(path, _settings(mode))
    for topic in TOPICS:
        await store.put_topic(topic)
    return store


@pytest.fixture
async def leader(tmp_path: Path) -> AsyncIterator[LocalStore]:
    store = await _open(tmp_path / "leader")
    rng = random.Random(5)
    for batch in range(40):
        await store.append(
            [
                MessageToAppend(
                    topic=rng.choice(TOPICS).name,
                    queue_id=rng.randrange(2),
                    body=rng.randbytes(rng.randint(100, 1500)),
                    properties={"TAGS": rng.choice(["a", "b"]), "UNIQ_KEY": f"{batch}-{i}"},
                )
                for i in range(rng.randint(1, 6))
            ]
        )
    yield store
    await store.close()


async def _catch_up(follower: LocalStore, leader: LocalStore, rng: random.Random) -> int:
    pieces = 0
    end = (await follower.info()).max_physical_offset
    while end < (await leader.info()).max_physical_offset:
        piece = leader.read_log(end, rng.choice([1, 57, 600, 3000, 20_000]))
        if not piece:  # a record longer than the bytes asked for: ask for more
            piece = leader.read_log(end, SEGMENT)
        end = await follower.append_replicated(end, piece)
        pieces += 1
    return pieces


def _segments(store: LocalStore) -> dict[str, bytes]:
    directory = store.data_dir / "commitlog"
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


async def _messages(store: LocalStore) -> list[tuple[str, int, int, bytes, str]]:
    out = []
    for topic in TOPICS:
        for queue_id in range(topic.write_queue_nums):
            offset = 0
            while True:
                read = await store.read(topic.name, queue_id, offset, max_count=32)
                if not read.messages:
                    break
                out += [
                    (topic.name, queue_id, m.queue_offset, m.body, m.properties["UNIQ_KEY"])
                    for m in read.messages
                ]
                offset = read.messages[-1].queue_offset + 1
    return out


@pytest.mark.parametrize(
    ("seed", "mode"), [(1, FlushMode.SYNC), (2, FlushMode.SYNC), (3, FlushMode.ASYNC)]
)
async def test_any_split_of_the_leaders_log_rebuilds_it(
    tmp_path: Path, leader: LocalStore, seed: int, mode: FlushMode
) -> None:
    follower = await _open(tmp_path / "follower", mode)
    try:
        pieces = await _catch_up(follower, leader, random.Random(seed))
        assert pieces > 3
        assert len(await _messages(leader)) > 100
        assert _segments(follower) == _segments(leader)
        assert len(_segments(leader)) > 3  # segments rolled, with fillers and tails
        assert await _messages(follower) == await _messages(leader)
        info = await follower.info()
        if mode is FlushMode.SYNC:  # answered only once on disk
            assert info.flushed_physical_offset == info.max_physical_offset
    finally:
        await follower.close()


async def test_a_restarted_follower_goes_on_from_its_end(
    tmp_path: Path, leader: LocalStore
) -> None:
    rng = random.Random(9)
    follower = await _open(tmp_path / "follower")
    end = await follower.append_replicated(0, leader.read_log(0, 3 * SEGMENT + 100))
    await follower.close()
    follower = await _open(tmp_path / "follower")
    try:
        assert (await follower.info()).max_physical_offset == end
        await _catch_up(follower, leader, rng)
        assert await _messages(follower) == await _messages(leader)
    finally:
        await follower.close()


@pytest.mark.parametrize(
    "damage",
    ["gap", "flipped byte", "cut inside a record", "not the next queue offset"],
)
async def test_bad_bytes_are_refused_and_change_nothing(
    tmp_path: Path, leader: LocalStore, damage: str
) -> None:
    follower = await _open(tmp_path / "follower")
    try:
        first = leader.read_log(0, 4000)
        end = await follower.append_replicated(0, first)
        before = _segments(follower), await _messages(follower)
        piece = leader.read_log(end, 4000)
        start = end
        if damage == "gap":
            start = end + 1
        elif damage == "flipped byte":
            piece = piece[:200] + bytes([piece[200] ^ 0x40]) + piece[201:]
        elif damage == "cut inside a record":
            piece = piece[:-7]
        else:  # a whole, valid record at the right place, but queue offsets skip ahead
            bounds = await follower.bounds("orders", 0)
            piece = fmt.encode_record(
                physical_offset=end, queue_id=0, queue_offset=bounds.max_queue_offset + 5,
                flags=0, born_timestamp_ms=1, store_timestamp_ms=1, reconsume_times=0,
                topic=b"orders", born_host=b"h", properties=b"", body=b"x",
            )  # fmt: skip
        with pytest.raises(InvalidArgument):
            await follower.append_replicated(start, piece)
        assert (await follower.info()).max_physical_offset == end
        assert (_segments(follower), await _messages(follower)) == before
    finally:
        await follower.close()


async def test_the_leader_never_cuts_a_record(leader: LocalStore) -> None:
    end = (await leader.info()).max_physical_offset
    position = 0
    while position < end:
        piece = leader.read_log(position, 777)
        if not piece:
            piece = leader.read_log(position, SEGMENT)
        assert piece, position
        position += len(piece)
    assert position == end
    assert leader.read_log(end, 100) == b""
    with pytest.raises(InvalidArgument):
        leader.read_log(end + 1, 100)


async def _open_at(path: Path, clock_ms: int = 1_700_000_000_000) -> LocalStore:
    # the periodic checkpoint a minute away: what is on disk right after a cut is the cut's
    settings = replace(_settings(), offsets_persist_interval_ms=60_000)
    store = LocalStore.open(path, settings, clock=lambda: clock_ms)
    for topic in TOPICS:
        await store.put_topic(topic)
    return store


async def _traffic(store: LocalStore, rng: random.Random, batches: int, label: str) -> None:
    await random_appends(store, rng, batches, label=label, topics=TOPICS, most=6)


async def test_a_follower_cut_at_the_divergence_point_follows_the_new_leader(
    tmp_path: Path,
) -> None:
    """Two leaders with the same first 15 appends (same clock, same bytes), then different
    ones: a follower of the first, cut where they part, becomes the second's copy, and
    stays one across a restart."""
    old, new = await _open_at(tmp_path / "old"), await _open_at(tmp_path / "new")
    follower = await _open_at(tmp_path / "follower")
    try:
        for store in (old, new):
            await _traffic(store, random.Random(1), 15, "common")
        parted = (await old.info()).max_physical_offset
        assert parted == (await new.info()).max_physical_offset
        await _traffic(old, random.Random(2), 25, "old")
        await _traffic(new, random.Random(3), 20, "new")
        await _catch_up(follower, old, random.Random(4))
        assert _segments(follower) == _segments(old)
        assert (await follower.info()).max_physical_offset > parted + 2 * SEGMENT

        await follower.close()  # its checkpoint now says the old leader's bytes are on disk
        follower = await _open_at(tmp_path / "follower")
        with pytest.raises(InvalidArgument):
            await follower.truncate_log(parted + 1)  # inside a record
        await follower.truncate_log(parted)
        assert (await follower.info()).max_physical_offset == parted
        # a process killed right after the cut leaves these files: they open at the cut
        shutil.copytree(tmp_path / "follower", tmp_path / "killed")
        killed = await _open_at(tmp_path / "killed")
        try:
            assert (await killed.info()).max_physical_offset == parted
            assert await _messages(killed) == await _messages(follower)
        finally:
            await killed.close()
        await _catch_up(follower, new, random.Random(5))
        assert _segments(follower) == _segments(new)
        assert await _messages(follower) == await _messages(new)
        await follower.close()
        follower = await _open_at(tmp_path / "follower")
        assert _segments(follower) == _segments(new)
        assert await _messages(follower) == await _messages(new)
    finally:
        for store in (old, new, follower):
            await store.close()


async def test_the_epoch_history_is_kept_checked_and_cut_with_the_log(tmp_path: Path) -> None:
    store = await _open_at(tmp_path / "s")
    try:
        store.record_epoch(1, 0)
        await _traffic(store, random.Random(1), 10, "one")
        cut_at = (await store.info()).max_physical_offset
        store.record_epoch(3, cut_at)
        await _traffic(store, random.Random(2), 10, "three")
        store.record_epoch(4, (await store.info()).max_physical_offset)  # a term with no bytes
        for epoch, start in [(4, 10**9), (2, cut_at), (5, cut_at - 1), (5, 10**12)]:
            with pytest.raises(InvalidArgument):
                store.record_epoch(epoch, start)
        assert store.epochs() == ((1, 0), (3, cut_at), (4, store.commitlog.end))
        await store.close()
        store = await _open_at(tmp_path / "s")
        assert store.epochs() == ((1, 0), (3, cut_at), (4, store.commitlog.end))
        await store.truncate_log(cut_at)  # epoch 3's bytes and empty epoch 4 go with it
        assert store.epochs() == ((1, 0),)
        shutil.copytree(tmp_path / "s", tmp_path / "killed")
        killed = await _open_at(tmp_path / "killed")
        try:
            assert killed.epochs() == ((1, 0),)
        finally:
            await killed.close()
        store.record_epoch(5, cut_at)  # the next term starts where the cut left the log
        assert store.epochs() == ((1, 0), (5, cut_at))
        store.record_term(7)  # seen, not yet written in
        with pytest.raises(InvalidArgument):
            store.record_term(6)
        await store.close()
        store = await _open_at(tmp_path / "s")
        assert (store.term(), store.epochs()) == (7, ((1, 0), (5, cut_at)))
    finally:
        await store.close()
