"""LocalStore.read_columns returns what read_now returns, as columns, for any position.

Across segment and consume-queue file boundaries (small files), below the min after
retention-like starts, at and beyond the end, and for unknown queues: same status, same
messages (offset, store time, properties, body), same next/min/max offsets.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from popbroker.store.api import PROPERTY_TAGS, MessageToAppend, ReadStatus, TopicConfig
from popbroker.store.errors import CorruptStore
from popbroker.store.local import LocalStore
from popbroker.store.segments import segment_name
from tests.storesettings import small_settings

pytestmark = pytest.mark.timeout(120)


async def _filled(data_dir: Path) -> LocalStore:
    store = LocalStore.open(data_dir, small_settings())
    await store.put_topic(TopicConfig("t", 2, 2))
    await store.put_topic(TopicConfig("empty", 1, 1))
    for start in range(0, 300, 50):
        await store.append(
            [
                MessageToAppend(
                    "t", i % 2, f"body-{i}".encode() * (i % 7 + 1), {PROPERTY_TAGS: f"tag{i % 3}"}
                )
                for i in range(start, start + 50)
            ]
        )
    return store


def _as_columns(
    store: LocalStore, topic: str, queue_id: int, at: int, count: int
) -> tuple[object, ...]:
    read = store.read_now(topic, queue_id, at, max_count=count, max_scan=count)
    return (
        read.status,
        [m.queue_offset for m in read.messages],
        [m.store_timestamp_ms for m in read.messages],
        [dict(m.properties) for m in read.messages],
        [m.body for m in read.messages],
        read.next_queue_offset,
        read.min_queue_offset,
        read.max_queue_offset,
    )


def test_columns_equal_message_reads(tmp_path: Path) -> None:
    store = asyncio.run(_filled(tmp_path / "data"))
    try:
        cases = [
            ("t", 0, at, count)
            for at in (0, 1, 63, 64, 140, 149, 150, 151)
            for count in (1, 7, 64, 200)
        ]
        cases += [("t", 1, 0, 1024), ("empty", 0, 0, 5), ("nope", 0, 0, 5), ("t", 5, 0, 5)]
        for topic, queue_id, at, count in cases:
            columns = store.read_columns(topic, queue_id, at, max_count=count)
            got = (
                columns.status, columns.queue_offsets, columns.store_timestamps_ms,
                columns.properties, columns.bodies, columns.next_queue_offset,
                columns.min_queue_offset, columns.max_queue_offset,
            )  # fmt: skip
            assert got == _as_columns(store, topic, queue_id, at, count), (topic, queue_id, at)
        assert store.read_columns("t", 0, 0, max_count=10).status is ReadStatus.FOUND
        assert store.read_columns("t", 0, 0, max_count=10).tags()[:3] == ["tag0", "tag2", "tag1"]
        with pytest.raises(Exception, match="max_count"):
            store.read_columns("t", 0, 0, max_count=0)
    finally:
        asyncio.run(store.close())


def test_a_damaged_record_in_a_bulk_read_is_named(tmp_path: Path) -> None:
    """One flipped byte in the middle of a bulk read: CorruptStore names that record's
    position (the span decoder refuses the span, the record-by-record decode says which)."""
    store = asyncio.run(_filled(tmp_path / "data"))
    try:
        victim = store.read_now("t", 0, 40, max_count=1, max_scan=1).messages[0]
        segment_bytes = small_settings().segment_bytes
        base = victim.physical_offset - victim.physical_offset % segment_bytes
        path = tmp_path / "data" / "commitlog" / segment_name(base)
        with path.open("r+b") as segment:
            segment.seek(victim.physical_offset - base + 60)
            byte = segment.read(1)
            segment.seek(-1, 1)
            segment.write(bytes([byte[0] ^ 0x40]))
        with pytest.raises(
            CorruptStore, match=f"physical offset {victim.physical_offset} is damaged"
        ):
            store.read_columns("t", 0, 30, max_count=64)
        assert store.read_columns("t", 0, 0, max_count=40).queue_offsets == list(range(40))
    finally:
        asyncio.run(store.close())
