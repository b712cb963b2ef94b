"""LocalStore.read_now, which reads a batch's records in spans, says what one read per
consume-queue entry says.

The reference below walks the consume queue entry by entry, reads each record on its own
(``CommitLog.read_verified``) and applies the filter to the real tag. Tag hashes are made
weak for these tests (the tag's length), so entries of other tags match a filter's hash
and must be dropped after the read -- the collision path -- and records cross segment and
consume-queue file boundaries (small files). Status, messages and the next offset must be
the reference's for every start, count, scan limit and filter; a damaged record in the
middle of a span is named, as a single read names it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from popbroker.store import filters
from popbroker.store.api import PROPERTY_TAGS, MessageToAppend, ReadStatus, TopicConfig
from popbroker.store.errors import CorruptStore
from popbroker.store.local import LocalStore
from tests.integration.store import faults
from tests.storesettings import small_settings

pytestmark = pytest.mark.timeout(120)

TAGS = ("aa", "bb", "ccc", "")  # "aa" and "bb" collide under the weak hash


@pytest.fixture(autouse=True)
def weak_tag_hashes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(filters, "tag_hash", len)


async def _filled(data_dir: Path) -> LocalStore:
    store = LocalStore.open(data_dir, small_settings())
    await store.put_topic(TopicConfig("t", 2, 2))
    for start in range(0, 400, 50):
        await store.append(
            [
                MessageToAppend(
                    "t",
                    i % 2,
                    f"body-{i}".encode() * (i % 5 + 1),
                    {PROPERTY_TAGS: TAGS[(i // 2) % 4]} if TAGS[(i // 2) % 4] else {},
                )
                for i in range(start, start + 50)
            ]
        )
    return store


def _reference(
    store: LocalStore, queue_id: int, at: int, *, max_count: int, max_scan: int, expression: str
) -> tuple[ReadStatus, list[tuple[int, bytes]], int]:
    """One consume-queue entry at a time, one record read per matching entry."""
    wanted = filters.parse_filter(expression)
    cq = store._cqs[("t", queue_id)]
    high = cq.max_queue_offset
    assert at < high  # the bounds' answers are read_columns' test's
    found: list[tuple[int, bytes]] = []
    offset = at
    while offset < min(at + max_scan, high) and len(found) < max_count:
        [(physical, size, _)] = cq.raw_entries(offset, 1)
        _, fields = store.commitlog.read_verified(physical, size)
        offset += 1
        if wanted.matches_tag(fields[10].get(PROPERTY_TAGS, "")):
            assert fields[3] == offset - 1
            found.append((fields[3], fields[11]))
    status = ReadStatus.FOUND if found else ReadStatus.NO_MATCHED_MESSAGE
    return status, found, offset


@pytest.mark.parametrize("expression", ["*", "aa", "bb||ccc", "zz"])
def test_batched_reads_equal_single_reads(tmp_path: Path, expression: str) -> None:
    store = asyncio.run(_filled(tmp_path / "data"))
    try:
        for queue_id in (0, 1):
            for at in (0, 1, 31, 63, 64, 100, 168, 199):
                for max_count, max_scan in ((1, 1), (1, 800), (7, 7), (32, 40), (32, 800)):
                    read = store.read_now(
                        "t", queue_id, at,
                        max_count=max_count, max_scan=max_scan, tag_filter=expression,
                    )  # fmt: skip
                    got = (
                        read.status,
                        [(m.queue_offset, m.body) for m in read.messages],
                        read.next_queue_offset,
                    )
                    expected = _reference(
                        store, queue_id, at,
                        max_count=max_count, max_scan=max_scan, expression=expression,
                    )  # fmt: skip
                    assert got == expected, (queue_id, at, max_count, max_scan)
                    assert all(m.record and m.topic == "t" for m in read.messages)
    finally:
        asyncio.run(store.close())


def test_a_damaged_record_in_a_batch_is_named(tmp_path: Path) -> None:
    store = asyncio.run(_filled(tmp_path / "data"))
    try:
        victim = store.read_now("t", 0, 40, max_count=1, max_scan=1).messages[0]
        path, position = faults.locate(
            tmp_path / "data", victim.physical_offset, small_settings().segment_bytes
        )
        faults.flip_byte(path, position + 60)
        with pytest.raises(
            CorruptStore, match=f"physical offset {victim.physical_offset} is damaged"
        ):
            store.read_now("t", 0, 30, max_count=32)
        before = store.read_now("t", 0, 0, max_count=32, max_scan=40)
        assert [m.queue_offset for m in before.messages] == list(range(32))
    finally:
        asyncio.run(store.close())
