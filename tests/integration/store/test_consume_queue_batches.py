"""Consume-queue entries are written per queue and file for a dispatched batch.

``ConsumeQueue.append_many`` must leave exactly the files that entry-by-entry appends
leave, across file boundaries; and when one queue's write fails with a full disk in the
middle of a batch that spans several queues, the whole append is taken back from the log
and from every queue, earlier appends stay readable, and the next append goes on where
they ended.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popbroker.store import format as fmt
from popbroker.store.api import FlushMode, MessageToAppend, TopicConfig
from popbroker.store.consumequeue import ConsumeQueue, Entry
from popbroker.store.errors import StoreFull
from popbroker.store.local import LocalStore
from tests.integration.store import _proc
from tests.storesettings import small_settings

TOPIC = _proc.TOPIC
QUEUES = 3

entry_lists = st.lists(
    st.tuples(st.integers(0, 2**40), st.integers(1, 2**20), st.integers(-(2**63), 2**63 - 1)),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(
    head=entry_lists,
    tail=entry_lists,
    per_file=st.integers(1, 7),
)
async def test_append_many_writes_what_appends_one_by_one_write(
    tmp_path_factory: pytest.TempPathFactory,
    head: list[tuple[int, int, int]],
    tail: list[tuple[int, int, int]],
    per_file: int,
) -> None:
    one_by_one_dir = tmp_path_factory.mktemp("one")
    batched_dir = tmp_path_factory.mktemp("many")
    one = ConsumeQueue(one_by_one_dir, topic=TOPIC, queue_id=0, entries_per_file=per_file)
    many = ConsumeQueue(batched_dir, topic=TOPIC, queue_id=0, entries_per_file=per_file)
    for offset, (physical, size, tag_hash) in enumerate(head + tail):
        one.append(Entry(offset, physical, size, tag_hash))
    many.append_many(0, head)
    many.append_many(len(head), tail)
    assert many.max_queue_offset == one.max_queue_offset == len(head) + len(tail)
    assert many.entries(0, 64) == one.entries(0, 64)
    files = sorted(p.name for p in batched_dir.iterdir())
    assert files == sorted(p.name for p in one_by_one_dir.iterdir())
    for name in files:
        assert (batched_dir / name).read_bytes() == (one_by_one_dir / name).read_bytes()
    one.close()
    many.close()


def test_append_many_refuses_an_offset_that_is_not_the_next(tmp_path: Path) -> None:
    cq = ConsumeQueue(tmp_path, topic=TOPIC, queue_id=0, entries_per_file=4)
    cq.append_many(0, [(0, 10, 1)])
    with pytest.raises(ValueError, match="entry 2 but next is 1"):
        cq.append_many(2, [(10, 10, 1)])
    assert cq.max_queue_offset == 1
    cq.close()


def _message(queue_id: int, n: int) -> MessageToAppend:
    return MessageToAppend(topic=TOPIC, queue_id=queue_id, body=f"m{queue_id}-{n}".encode())


async def _bodies(store: LocalStore, queue_id: int) -> list[bytes]:
    result = await store.read(TOPIC, queue_id, 0, max_count=64)
    return [m.body for m in result.messages]


@contextlib.asynccontextmanager
async def _open_store(tmp_path: Path, mode: FlushMode) -> AsyncIterator[LocalStore]:
    """A store with 4 entries per consume-queue file and a topic of ``QUEUES`` queues."""
    store = LocalStore.open(
        tmp_path / "data", small_settings(cq_entries_per_file=4, flush_mode=mode)
    )
    try:
        await store.put_topic(TopicConfig(TOPIC, QUEUES, QUEUES))
        yield store
    finally:
        await store.close()


class _FullAfter:
    """A consume-queue file whose writes fail with a full disk after ``ok`` of them."""

    def __init__(self, append: Any, ok: int) -> None:
        self._append, self._left = append, ok

    def __call__(self, data: bytes) -> int:
        if self._left == 0:
            raise StoreFull("disk full (injected)")
        self._left -= 1
        return int(self._append(data))


@pytest.mark.parametrize(
    ("failing_queue", "writes_before_failing"),
    [(0, 0), (1, 0), (2, 0), (1, 1)],
    ids=["first-queue", "middle-queue", "last-queue", "second-file-of-a-queue"],
)
async def test_a_full_disk_mid_batch_takes_the_whole_append_back_from_every_queue(
    tmp_path: Path, failing_queue: int, writes_before_failing: int
) -> None:
    async with _open_store(tmp_path, FlushMode.ASYNC) as store:
        # earlier appends: 3 entries in each queue, so a batch of 3 more crosses a file
        before = [_message(q, n) for n in range(3) for q in range(QUEUES)]
        await store.append(before)
        log_end = store.commitlog.end
        cq = store._cqs[(TOPIC, failing_queue)]
        cq.file.append = _FullAfter(cq.file.append, writes_before_failing)  # type: ignore[method-assign]
        batch = [_message(q, n) for n in range(3, 6) for q in range(QUEUES)]  # interleaved
        with pytest.raises(StoreFull, match="injected"):
            await store.append(batch)
        assert store.commitlog.end == log_end  # the log holds none of the batch
        for queue_id in range(QUEUES):  # nor does any queue, whatever its write did
            assert store._cqs[(TOPIC, queue_id)].max_queue_offset == 3
            assert await _bodies(store, queue_id) == [f"m{queue_id}-{n}".encode() for n in range(3)]
        del cq.file.append  # space is back
        results = await store.append(batch)
        assert [(r.queue_id, r.queue_offset) for r in results] == [
            (q, n) for n in range(3, 6) for q in range(QUEUES)
        ]
        for queue_id in range(QUEUES):
            assert await _bodies(store, queue_id) == [f"m{queue_id}-{n}".encode() for n in range(6)]


def _dispatch_with_q0_full_after_one_write(store: LocalStore) -> None:
    """Dispatch what is pending, as the flusher would, while queue 0's consume-queue file
    takes one write and then finds the disk full; space is back after."""
    cq = store._cqs[(TOPIC, 0)]
    cq.file.append = _FullAfter(cq.file.append, 1)  # type: ignore[method-assign]
    try:
        with store.lock, pytest.raises(StoreFull, match="injected"):
            store.dispatch_upto_locked(store.commitlog.end)
    finally:
        del cq.file.append


async def test_a_full_disk_in_a_dispatch_of_two_appends_takes_back_from_the_first_unindexed(
    tmp_path: Path,
) -> None:
    """SYNC mode dispatches after a flush, so one dispatch can hold several appends. Append
    A = [q0, q1] and B = [q0, q2]; q0 is written first (A's and B's entries, across a file
    boundary) and its second file fails: q1's entry of A was never written, so A and B
    are both taken back, never A counted as indexed (its q1 message would be unreadable)."""

    async with _open_store(tmp_path, FlushMode.SYNC) as store:
        await store.append([_message(q, n) for n in range(3) for q in range(QUEUES)])
        log_end = store.commitlog.end
        store.flusher.stop()  # this test dispatches by hand, as the flusher would
        store._append([_message(0, 3), _message(1, 3)], store._prepare)  # A
        store._append([_message(0, 4), _message(2, 3)], store._prepare)  # B
        _dispatch_with_q0_full_after_one_write(store)
        assert store.commitlog.end == log_end
        assert store._pending == []
        for queue_id in range(QUEUES):
            assert store._cqs[(TOPIC, queue_id)].max_queue_offset == 3
            assert await _bodies(store, queue_id) == [f"m{queue_id}-{n}".encode() for n in range(3)]
        # the offsets A and B had are given out again
        store._append([_message(1, 3)], store._prepare)
        with store.lock:
            store.dispatch_upto_locked(store.commitlog.end)
        assert await _bodies(store, 1) == [f"m1-{n}".encode() for n in range(4)]


async def test_a_full_disk_in_a_later_append_of_a_dispatch_keeps_the_earlier_one(
    tmp_path: Path,
) -> None:
    """A = [q0] fills q0's first file, B and C = [q0] need the next one, which fails: A is
    indexed whole and stays (its SYNC appender is answered); B, the first append not
    indexed, and C after it are taken back."""

    async with _open_store(tmp_path, FlushMode.SYNC) as store:
        await store.append([_message(0, n) for n in range(3)])
        store.flusher.stop()  # this test dispatches by hand, as the flusher would
        store._append([_message(0, 3)], store._prepare)  # A
        a_end = store.commitlog.end
        store._append([_message(0, 4)], store._prepare)  # B
        store._append([_message(0, 5)], store._prepare)  # C
        _dispatch_with_q0_full_after_one_write(store)
        assert store.commitlog.end == a_end
        assert await _bodies(store, 0) == [f"m0-{n}".encode() for n in range(4)]


def test_entries_per_file_bounds_each_write(tmp_path: Path) -> None:
    """A batch crossing a file boundary is written as one write per file."""
    cq = ConsumeQueue(tmp_path, topic=TOPIC, queue_id=0, entries_per_file=4)
    sizes: list[int] = []
    inner = cq.file.append

    def counting(data: bytes) -> int:
        sizes.append(len(data) // fmt.CQ_ENTRY_SIZE)
        return int(inner(data))

    cq.file.append = counting  # type: ignore[method-assign]
    cq.append_many(0, [(i * 10, 10, 0) for i in range(3)])
    cq.append_many(3, [(i * 10, 10, 0) for i in range(3, 13)])
    assert sizes == [3, 1, 4, 4, 1]
    cq.close()
