"""Retention deletes whole old segments from the head and says when a group loses data."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from popbroker.store.api import MessageToAppend, ReadStatus, TopicConfig
from popbroker.store.local import LocalStore
from tests.storesettings import small_settings

HOUR_MS = 3_600_000


class Clock:
    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


async def _fill(store: LocalStore, count: int) -> None:
    body = b"r" * 4000
    for i in range(count):
        await store.append([MessageToAppend("t", 0, body + str(i).encode())])


@pytest.fixture
def aged_store(tmp_path: Path) -> Callable[..., LocalStore]:
    def _open(**overrides: object) -> LocalStore:
        settings = small_settings(
            segment_bytes=64 * 1024,
            max_body_bytes=16 * 1024,
            retention_check_interval_ms=3_600_000,
            **overrides,
        )
        return LocalStore.open(tmp_path / "data", settings, clock=Clock(10**12))

    return _open


async def test_size_limit_deletes_head_segments_and_moves_queue_minimum(
    aged_store: Callable[..., LocalStore],
) -> None:
    store = aged_store(retention_max_bytes=200 * 1024)
    await store.put_topic(TopicConfig("t", 1, 1))
    await _fill(store, 100)  # ~400 KiB over 64 KiB segments
    deleted = store.run_retention()
    assert deleted, "expected head segments to be deleted"
    assert deleted == sorted(deleted) and deleted[0] == 0
    bounds = await store.bounds("t", 0)
    assert bounds.min_queue_offset > 0 and bounds.max_queue_offset == 100
    gone = await store.read("t", 0, 0, max_count=1)
    assert gone.status is ReadStatus.OFFSET_TOO_SMALL
    assert gone.next_queue_offset == bounds.min_queue_offset
    first = await store.read("t", 0, bounds.min_queue_offset, max_count=1)
    assert first.messages[0].body.endswith(str(bounds.min_queue_offset).encode())
    await store.close()


async def test_retention_logs_each_group_whose_unconsumed_messages_it_deletes(
    aged_store: Callable[..., LocalStore], caplog: pytest.LogCaptureFixture
) -> None:
    store = aged_store(retention_max_bytes=200 * 1024)
    await store.put_topic(TopicConfig("t", 1, 1))
    await _fill(store, 100)
    await store.commit_offset(group="slow-group", topic="t", queue_id=0, queue_offset=3)
    await store.commit_offset(group="fast-group", topic="t", queue_id=0, queue_offset=100)
    with caplog.at_level(logging.WARNING, logger="popbroker.store.local"):
        store.run_retention()
    lines = [r.getMessage() for r in caplog.records]
    assert any("slow-group" in line and "not consumed" in line for line in lines), lines
    assert not any("fast-group" in line for line in lines)
    await store.close()


async def test_age_limit_keeps_young_segments(aged_store: Callable[..., LocalStore]) -> None:
    store = aged_store(retention_hours=1.0)
    await store.put_topic(TopicConfig("t", 1, 1))
    await _fill(store, 40)
    # segment mtimes are "now" on the real clock, far younger than the injected clock's 10**12 ms;
    # with the injected clock moved back to the files' age, nothing is expired yet
    assert isinstance(store.clock, Clock)
    store.clock.now_ms = Path(store.data_dir / "commitlog").stat().st_mtime_ns // 10**6
    assert store.run_retention() == []
    store.clock.now_ms += 2 * HOUR_MS
    assert store.run_retention() != []
    await store.close()


async def test_retention_survives_reopen(aged_store: Callable[..., LocalStore]) -> None:
    store = aged_store(retention_max_bytes=200 * 1024)
    await store.put_topic(TopicConfig("t", 1, 1))
    await _fill(store, 100)
    store.run_retention()
    before = await store.bounds("t", 0)
    await store.close()
    reopened = aged_store(retention_max_bytes=200 * 1024)
    assert await reopened.bounds("t", 0) == before
    result = await reopened.read("t", 0, before.min_queue_offset, max_count=5)
    assert result.status is ReadStatus.FOUND
    await reopened.close()
