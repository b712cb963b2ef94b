"""Disk full: appends fail with a clear error, nothing partial is kept, reads go on,
and appends resume when space returns.

The store lives on a 2 MiB tmpfs mounted for the test (root is required, here and
in CI; a failed mount fails the test with the reason, it never skips). A filler
file created on the same tmpfs first is deleted to give space back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from popbroker.store.api import FlushMode, TopicConfig
from popbroker.store.errors import StoreFull
from popbroker.store.local import LocalStore
from tests.integration.store import _proc, faults

SEED = 11
FILLER_BYTES = 384 * 1024


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with faults.mounted_tmpfs(tmp_path / "tmpfs", size="2m") as mounted:
        yield mounted


async def _append_one(
    store: LocalStore, written: list[faults.Written], *, body_bytes: int | None = None
) -> None:
    """Append the writer's next message, round-robin over the queues; record it.

    ``body_bytes`` cuts bodies short: with tiny records the consume-queue files
    need new pages more often than the commit log, so the disk fills there first.
    """
    queue_id = len(written) % faults.QUEUES
    queue_offset = sum(1 for w in written if w.queue_id == queue_id)
    message = _proc.message(SEED, queue_id, queue_offset)
    if body_bytes is not None:
        message = dataclasses.replace(message, body=message.body[:body_bytes] + b".")
    [result] = await store.append([message])
    assert result.queue_offset == queue_offset
    written.append(
        faults.Written(
            topic=result.topic,
            queue_id=result.queue_id,
            queue_offset=result.queue_offset,
            physical_offset=result.physical_offset,
            size=result.size,
            body=message.body,
            tag=_proc.tag_for(result.queue_offset),
        )
    )


async def _append_until_full(
    store: LocalStore, written: list[faults.Written], *, body_bytes: int | None
) -> StoreFull:
    for _ in range(40_000):  # 2 MiB hold far fewer records, even tiny ones
        try:
            await _append_one(store, written, body_bytes=body_bytes)
        except StoreFull as full:
            return full
    pytest.fail(f"no StoreFull after {len(written)} appends on a 2 MiB disk")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", [FlushMode.SYNC, FlushMode.ASYNC], ids=["sync", "async"])
@pytest.mark.parametrize(
    ("body_bytes", "fills_up"),
    [(None, "commitlog"), (8, "consumequeue")],
    ids=["full-in-commit-log", "full-in-consume-queue"],
)
def test_a_full_disk_refuses_appends_keeps_reads_and_resumes_when_space_returns(
    small_disk: Path, mode: FlushMode, body_bytes: int | None, fills_up: str
) -> None:
    filler = small_disk / "filler"
    filler.write_bytes(bytes(FILLER_BYTES))
    data_dir = small_disk / "data"
    settings = faults.settings(flush_mode=mode)
    written: list[faults.Written] = []

    async def scenario() -> None:
        store = LocalStore.open(data_dir, settings)
        try:
            await store.put_topic(TopicConfig(faults.TOPIC, faults.QUEUES, faults.QUEUES))
            full = await _append_until_full(store, written, body_bytes=body_bytes)
            assert "disk full" in str(full)
            assert f"/data/{fills_up}/" in str(full)
            assert full.retriable
            assert isinstance(full.__cause__, OSError)
            assert full.__cause__.errno == errno.ENOSPC
            assert len(written) > 50

            # nothing of the failed append is kept, and the store says why it is stuck
            info = await store.info()
            assert info.max_physical_offset == written[-1].end
            assert not info.writable
            assert "disk full" in info.last_error
            faults.assert_reads_exactly(store, written)

            # still full: another attempt fails the same way and changes nothing
            with pytest.raises(StoreFull):
                await _append_one(store, written, body_bytes=body_bytes)
            assert (await store.info()).max_physical_offset == written[-1].end

            filler.unlink()  # space is back: appends succeed again
            before = len(written)
            for _ in range(40):
                await _append_one(store, written, body_bytes=body_bytes)
            assert len(written) == before + 40
            info = await store.info()
            assert info.writable
            assert info.last_error == ""
            faults.assert_reads_exactly(store, written)
        finally:
            await store.close()

    asyncio.run(scenario())

    # the directory reopens as exactly what was acknowledged: no extra, no partial record
    store = faults.open_store(data_dir, settings)
    try:
        faults.assert_reads_exactly(store, written)
        assert store.commitlog.end == written[-1].end
    finally:
        store.close_sync()


@pytest.mark.timeout(60)
def test_concurrent_sync_appenders_on_a_full_disk_keep_exactly_what_was_acknowledged(
    small_disk: Path,
) -> None:
    """Eight appenders, one queue each, batches of tiny records: the disk fills while
    indexing a group commit, so some waiters of one fsync succeed and the rest are
    taken back, including the indexed part of a batch; each batch stays all or none."""
    filler = small_disk / "filler"
    filler.write_bytes(bytes(FILLER_BYTES))
    data_dir = small_disk / "data"
    settings = faults.settings(flush_mode=FlushMode.SYNC)
    appenders = 8
    acked: list[faults.Written] = []

    async def appender(store: LocalStore, queue_id: int, *, start: int, limit: int) -> int:
        """Append batches of 1-3 tiny records until ``StoreFull``; return the next offset."""
        queue_offset = start
        for round_no in itertools.count():
            if queue_offset >= limit:
                return queue_offset
            count = min(1 + (queue_id + round_no) % 3, limit - queue_offset)
            batch = []
            for i in range(count):
                message = _proc.message(SEED, queue_id, queue_offset + i)
                batch.append(dataclasses.replace(message, body=message.body[:8] + b"."))
            try:
                results = await store.append(batch)
            except StoreFull:
                return queue_offset
            for message, result in zip(batch, results, strict=True):
                assert result.queue_offset == queue_offset
                acked.append(
                    faults.Written(
                        faults.TOPIC,
                        queue_id,
                        queue_offset,
                        result.physical_offset,
                        result.size,
                        message.body,
                        _proc.tag_for(queue_offset),
                    )
                )
                queue_offset += 1
        raise AssertionError("unreachable")

    async def scenario() -> None:
        store = LocalStore.open(data_dir, settings)
        try:
            await store.put_topic(TopicConfig(faults.TOPIC, appenders, appenders))
            stopped = await asyncio.gather(
                *(appender(store, q, start=0, limit=20_000) for q in range(appenders))
            )
            assert all(n < 20_000 for n in stopped), "the disk never filled"
            assert not (await store.info()).writable
            faults.assert_reads_exactly(store, acked, queues=appenders)

            filler.unlink()
            resumed = await asyncio.gather(
                *(appender(store, q, start=n, limit=n + 10) for q, n in enumerate(stopped))
            )
            assert resumed == [n + 10 for n in stopped]
            assert (await store.info()).writable
        finally:
            await store.close()

    asyncio.run(scenario())
    store = faults.open_store(data_dir, settings)
    try:
        faults.assert_reads_exactly(store, acked, queues=appenders)
    finally:
        store.close_sync()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", [FlushMode.SYNC, FlushMode.ASYNC], ids=["sync", "async"])
def test_a_store_closed_and_reopened_on_a_full_disk_keeps_every_acknowledged_append(
    small_disk: Path, mode: FlushMode
) -> None:
    """A restart while the disk is still full: close releases the directory, and the
    store opens again with everything acknowledged."""
    filler = small_disk / "filler"
    filler.write_bytes(bytes(FILLER_BYTES))
    data_dir = small_disk / "data"
    settings = faults.settings(flush_mode=mode)
    written: list[faults.Written] = []

    async def fill() -> None:
        store = LocalStore.open(data_dir, settings)
        try:
            await store.put_topic(TopicConfig(faults.TOPIC, faults.QUEUES, faults.QUEUES))
            await _append_until_full(store, written, body_bytes=8)
        finally:
            await store.close()

    asyncio.run(fill())
    store = faults.open_store(data_dir, settings)  # the disk is still full
    try:
        faults.assert_reads_exactly(store, written)
    finally:
        store.close_sync()
    filler.unlink()
    store = faults.open_store(data_dir, settings)
    try:
        faults.assert_reads_exactly(store, written)
        asyncio.run(_append_one(store, written))
        faults.assert_reads_exactly(store, written)
    finally:
        store.close_sync()
