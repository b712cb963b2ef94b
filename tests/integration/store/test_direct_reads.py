"""Direct reads (``popbroker.store.direct``) answer exactly as the store does, or defer to it.

The reference is the store itself: ``LocalStore.read_now`` on the same files, and a
store process's ``Read`` over its socket. Every direct answer must equal the store's;
where the files cannot settle the answer (retention, a damaged or half-written
entry, a queue that does not exist) the direct read must defer, never guess.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
import random
from pathlib import Path

import pytest

from popbroker.roles import running
from popbroker.store import format as fmt
from popbroker.store.api import MessageToAppend, ReadStatus, StoreInfo, TopicConfig
from popbroker.store.direct import DirectReads
from popbroker.store.errors import UnknownTopic
from popbroker.store.local import LocalStore
from tests.integration.store.remote_fixture import store_process_factory
from tests.storesettings import small_settings

TAGS = ("A", "B", "C", "")


async def _fill(store: LocalStore, rng: random.Random, *, count: int) -> None:
    for start in range(0, count, 16):
        batch = [
            MessageToAppend(
                rng.choice(["t", "u"]),
                rng.randrange(2),
                rng.randbytes(rng.randrange(1, 3000)),
                {"TAGS": rng.choice(TAGS)} if rng.random() < 0.9 else {},
            )
            for _ in range(min(16, count - start))
        ]
        await store.append(batch)


def _direct(store: LocalStore, data_dir: Path) -> DirectReads:
    return DirectReads(
        data_dir,
        segment_bytes=store.settings.segment_bytes,
        cq_entries_per_file=store.settings.cq_entries_per_file,
    )


async def _opened(data_dir: Path, **overrides: object) -> LocalStore:
    store = LocalStore.open(data_dir, small_settings(**overrides))
    for topic in ("t", "u"):
        await store.put_topic(TopicConfig(topic, read_queue_nums=2, write_queue_nums=2))
    return store


def _assert_same_or_deferred(
    store: LocalStore, direct: DirectReads, topic: str, queue_id: int, offset: int, **kw: object
) -> bool:
    """The direct answer equals the store's; returns whether the direct read answered."""
    answer = direct.read(topic, queue_id, offset, **kw)  # type: ignore[arg-type]
    if answer is None:
        return False
    expected = store.read_now(topic, queue_id, offset, **kw)  # type: ignore[arg-type]
    assert answer == expected, (topic, queue_id, offset, kw)
    assert [m.record for m in answer.messages] == [m.record for m in expected.messages]
    return True


async def test_every_offset_filter_and_count_reads_as_the_store_reads(tmp_path: Path) -> None:
    """Across segment and queue-file boundaries (small files), with tag filters and scans."""
    store = await _opened(
        tmp_path / "data", segment_bytes=64 * 1024, cq_entries_per_file=16, max_body_bytes=16 * 1024
    )
    try:
        await _fill(store, random.Random(7), count=600)
        direct = _direct(store, tmp_path / "data")
        for topic, queue_id in itertools.product(("t", "u"), (0, 1)):
            bounds = await store.bounds(topic, queue_id)
            assert direct.bounds(topic, queue_id) == bounds
            high = bounds.max_queue_offset
            assert high > 100
            for offset in [*range(0, high + 1, 7), high - 1, high]:
                for kw in (
                    {"max_count": 32},
                    {"max_count": 1},
                    {"max_count": 5, "tag_filter": "A"},
                    {"max_count": 32, "tag_filter": "B || C", "max_scan": 40},
                    {"max_count": 3, "tag_filter": "nothing", "max_scan": 3},
                ):
                    answered = _assert_same_or_deferred(
                        store, direct, topic, queue_id, offset, **kw
                    )
                    assert answered, "every offset in [min, max] is the files' to answer"
        assert direct.counts.deferred == 0
    finally:
        await store.close()


async def test_what_the_files_cannot_settle_goes_to_the_store(tmp_path: Path) -> None:
    store = await _opened(tmp_path / "data")
    try:
        await _fill(store, random.Random(8), count=64)
        direct = _direct(store, tmp_path / "data")
        high = (await store.bounds("t", 0)).max_queue_offset
        assert direct.read("nope", 0, 0, max_count=1) is None  # no such topic
        assert direct.read("t", 9, 0, max_count=1) is None  # no such queue
        assert direct.read("t", 0, high + 5, max_count=1) is None  # beyond the end
        assert direct.read("t", 0, 0, max_count=0) is None  # a bad count: the store names it
        assert direct.read("t", 0, 0, max_count=4, max_scan=2) is None
        assert direct.read("t", 0, 0, max_count=1, tag_filter="||") is None  # a bad filter
        assert direct.read("../../t", 0, 0, max_count=1) is None
        assert direct.bounds("nope", 0) is None and direct.bounds("t", 9) is None
        assert direct.counts.deferred == 9 and direct.counts.answered == 0
        at_end = direct.read("t", 0, high, max_count=1)
        assert at_end == store.read_now("t", 0, high, max_count=1)
        assert at_end is not None and at_end.status is ReadStatus.OFFSET_OVERFLOW_ONE
    finally:
        await store.close()


async def test_retention_makes_reads_below_the_minimum_go_to_the_store(tmp_path: Path) -> None:
    store = await _opened(
        tmp_path / "data",
        segment_bytes=64 * 1024,
        max_body_bytes=16 * 1024,
        cq_entries_per_file=1000,  # one queue file: retention cannot delete it
        retention_max_bytes=200 * 1024,
        retention_check_interval_ms=3_600_000,
    )
    try:
        for i in range(100):
            await store.append([MessageToAppend("t", 0, b"r" * 4000 + str(i).encode())])
        assert store.run_retention()
        bounds = await store.bounds("t", 0)
        low = bounds.min_queue_offset
        assert low > 0
        direct = _direct(store, tmp_path / "data")
        assert direct.bounds("t", 0) == bounds
        for offset in range(0, 101):
            answered = _assert_same_or_deferred(store, direct, "t", 0, offset, max_count=8)
            assert answered is (offset >= low), offset
        assert store.read_now("t", 0, 0, max_count=1).status is ReadStatus.OFFSET_TOO_SMALL
    finally:
        await store.close()


async def test_a_half_written_or_foreign_entry_is_never_served(tmp_path: Path) -> None:
    """Bytes the dispatcher did not (yet) finish: a torn entry is not counted, and an entry
    whose record is not the entry's defers the read."""
    store = await _opened(tmp_path / "data")
    try:
        await _fill(store, random.Random(9), count=40)
        direct = _direct(store, tmp_path / "data")
        high = (await store.bounds("u", 1)).max_queue_offset
        queue_dir = tmp_path / "data" / "consumequeue" / "u" / "1"
        last = max(queue_dir.iterdir())
        with last.open("ab") as f:
            f.write(b"\x00" * 7)  # a torn entry: not an entry
        assert _assert_same_or_deferred(store, direct, "u", 1, 0, max_count=32)
        assert _assert_same_or_deferred(store, direct, "u", 1, high, max_count=32)
        first = store.read_now("t", 0, 0, max_count=1).messages[0]
        with last.open("ab") as f:  # pad to a whole entry, then one naming t/0's record
            f.write(b"\x00" * 13 + fmt.encode_cq_entry(first.physical_offset, 64, 0))
        assert direct.read("u", 1, high + 1, max_count=1) is None  # the zero entry
        assert direct.read("u", 1, high, max_count=1) is None  # padding: no record there
        os.truncate(last, last.stat().st_size - 40)  # the dispatcher's writes, undone
        assert _assert_same_or_deferred(store, direct, "u", 1, 0, max_count=32)
    finally:
        await store.close()


async def test_a_deleted_and_re_created_topic_reads_its_new_messages(tmp_path: Path) -> None:
    store = await _opened(tmp_path / "data")
    try:
        await _fill(store, random.Random(10), count=64)
        direct = _direct(store, tmp_path / "data")
        await store.delete_topic("t")
        assert direct.read("t", 0, 0, max_count=8) is None
        await store.put_topic(TopicConfig("t", read_queue_nums=2, write_queue_nums=2))
        await store.append([MessageToAppend("t", 0, b"new", {"TAGS": "A"})])
        answer = direct.read("t", 0, 0, max_count=8)
        assert answer is not None and [m.body for m in answer.messages] == [b"new"]
        assert answer == store.read_now("t", 0, 0, max_count=8)
    finally:
        await store.close()


def test_a_directory_without_the_store_is_refused(tmp_path: Path) -> None:
    info = StoreInfo(
        cluster="c",
        broker_name="b",
        config_epoch="1",
        flush_mode=small_settings().flush_mode,
        min_physical_offset=0,
        max_physical_offset=0,
        flushed_physical_offset=0,
        writable=True,
        segment_bytes=4096,
        cq_entries_per_file=10,
    )
    with pytest.raises(running.NotTheStoresDirectory, match="no commitlog"):
        running.direct_reads(tmp_path, info)
    (tmp_path / "commitlog").mkdir()
    with pytest.raises(running.NotTheStoresDirectory, match="layout"):
        running.direct_reads(tmp_path, dataclasses.replace(info, cq_entries_per_file=0))
    assert running.direct_reads(tmp_path, info).segment_bytes == 4096


async def test_reads_during_appends_by_a_store_process_are_whole_and_in_order(
    tmp_path: Path,
) -> None:
    """The race direct reads exist with: a store process dispatching while popack reads.
    Every direct answer is a run of whole, verified messages in queue order, equal to
    what the store's own Read answers for the same range once it is written."""
    with store_process_factory(tmp_path) as spawn:
        process = spawn(tmp_path / "data", settings=small_settings(cq_entries_per_file=32))
        writer = await process.connect()
        reader = await process.connect()
        try:
            await writer.put_topic(TopicConfig("t", read_queue_nums=1, write_queue_nums=1))
            reader.read_directly(running.direct_reads(tmp_path / "data", await reader.info()))
            direct = reader.direct_reads
            assert direct is not None
            total = 1500

            async def produce() -> None:
                for start in range(0, total, 10):
                    batch = range(start, start + 10)
                    await writer.append([MessageToAppend("t", 0, f"m{i}".encode()) for i in batch])

            producing = asyncio.create_task(produce())
            seen = 0
            reads = 0
            async with asyncio.timeout(60):
                while seen < total:
                    result = await reader.read("t", 0, seen, max_count=64)
                    reads += 1
                    bodies = [m.body for m in result.messages]
                    assert bodies == [f"m{i}".encode() for i in range(seen, seen + len(bodies))]
                    assert [m.queue_offset for m in result.messages] == list(
                        range(seen, seen + len(bodies))
                    )
                    seen += len(bodies)
                    if not bodies:
                        await asyncio.sleep(0)  # let the producer's call make progress
            await producing
            assert direct.counts.answered > 0
            for offset in range(0, total, 97):
                over_wire = await writer.read("t", 0, offset, max_count=40)
                assert await reader.read("t", 0, offset, max_count=40) == over_wire
        finally:
            await reader.close()
            await writer.close()


async def test_a_queue_without_files_is_answered_as_the_store_last_said_until_config_changes(
    tmp_path: Path,
) -> None:
    """An idle revive queue or a retry topic not created yet: the store is asked once, and
    again only after a config change (a topic created or deleted) or once the queue has
    files."""
    with store_process_factory(tmp_path) as spawn:
        process = spawn(tmp_path / "data", settings=small_settings())
        store = await process.connect()
        try:
            store.read_directly(running.direct_reads(tmp_path / "data", await store.info()))
            direct = store.direct_reads
            assert direct is not None

            async def status(topic: str) -> ReadStatus:
                return (await store.read(topic, 0, 0, max_count=1)).status

            assert await status("later") is ReadStatus.NO_SUCH_QUEUE
            asked = direct.counts.deferred
            assert await status("later") is ReadStatus.NO_SUCH_QUEUE
            with pytest.raises(UnknownTopic):
                await store.bounds("later", 0)
            assert direct.counts.deferred == asked  # answered from what the store said

            await store.put_topic(TopicConfig("later", read_queue_nums=1, write_queue_nums=1))
            assert await status("later") is ReadStatus.NO_MESSAGE_IN_QUEUE  # asked again
            assert direct.counts.deferred == asked + 1
            assert await status("later") is ReadStatus.NO_MESSAGE_IN_QUEUE
            assert (await store.bounds("later", 0)).max_queue_offset == 0
            assert direct.counts.deferred == asked + 1

            await store.append([MessageToAppend("later", 0, b"first")])
            found = await store.read("later", 0, 0, max_count=1)
            assert [m.body for m in found.messages] == [b"first"]

            await store.delete_topic("later")
            assert await status("later") is ReadStatus.NO_SUCH_QUEUE
        finally:
            await store.close()
