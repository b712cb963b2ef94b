"""Recovery: damage that is not a torn tail is refused with a clear message, never guessed.

A flipped byte in a record that was fsynced (below the flush checkpoint), or in a
record that valid records follow, cannot come from a crash in the middle of an
append: the disk or someone's editor damaged durable data. The store refuses to
open, naming the physical offset, and ``repair=True`` opens by truncating there.
Damage in a segment older than the checkpoint's is not re-verified at open; the
read of that record must then fail, not return wrong bytes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from popbroker.store.errors import CorruptStore
from tests.integration.store import faults

FIELDS = ["total_size", "magic", "crc", "physical_offset", "queue_offset", "body"]


def _assert_repaired(tmp_path: Path, written: list[faults.Written], damaged_at: int) -> None:
    """``repair=True`` truncates at the damaged record and keeps everything before it."""
    store = faults.open_store(tmp_path, faults.settings(), repair=True)
    try:
        assert store.commitlog.end == damaged_at
        faults.assert_reads_exactly(store, [w for w in written if w.end <= damaged_at])
    finally:
        store.close_sync()
    # and the repaired store opens normally afterwards
    store = faults.open_store(tmp_path, faults.settings())
    store.close_sync()


@pytest.mark.parametrize("field", FIELDS)
def test_a_flipped_byte_below_the_flush_checkpoint_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, field: str
) -> None:
    written = faults.populate(tmp_path, faults.settings(), count=160)
    # a record in the last segment: recovery verifies from the checkpoint's segment
    candidates = faults.in_last_segment(tmp_path, written)
    assert len(candidates) >= 4
    victim = candidates[len(candidates) // 2]
    faults.flip_record_byte(tmp_path, victim, field)

    with pytest.raises(CorruptStore) as refused:
        faults.open_store(tmp_path, faults.settings())
    message = str(refused.value)
    assert f"physical offset {victim.physical_offset}" in message
    assert "below the flush checkpoint" in message
    assert "repair" in message

    caplog.set_level(logging.ERROR)
    _assert_repaired(tmp_path, written, victim.physical_offset)
    assert "--repair given: truncating" in caplog.text


@pytest.mark.parametrize("field", FIELDS)
def test_a_flipped_byte_with_valid_records_after_it_is_refused_above_the_checkpoint(
    tmp_path: Path, field: str
) -> None:
    first = faults.populate(tmp_path, faults.settings(), count=120)
    second = faults.populate(tmp_path, faults.settings(), count=24, earlier=first)
    faults.set_flush_checkpoint(tmp_path, first[-1].end)
    # damage with valid records after it in the same segment, and no later segment
    candidates = faults.in_last_segment(tmp_path, second)
    assert len(candidates) >= 4
    victim = candidates[len(candidates) // 2]
    faults.flip_record_byte(tmp_path, victim, field)

    with pytest.raises(CorruptStore) as refused:
        faults.open_store(tmp_path, faults.settings())
    message = str(refused.value)
    assert f"physical offset {victim.physical_offset}" in message
    assert "valid records follow" in message

    _assert_repaired(tmp_path, first + second, victim.physical_offset)


def test_a_refused_store_leaves_its_files_untouched(tmp_path: Path) -> None:
    written = faults.populate(tmp_path, faults.settings(), count=60)
    faults.flip_record_byte(tmp_path, faults.in_last_segment(tmp_path, written)[1], "body")
    before = {p.name: p.read_bytes() for p in faults.commitlog_segments(tmp_path)}

    for _ in range(2):
        with pytest.raises(CorruptStore):
            faults.open_store(tmp_path, faults.settings())
    assert {p.name: p.read_bytes() for p in faults.commitlog_segments(tmp_path)} == before


@pytest.mark.parametrize("field", ["crc", "body", "physical_offset"])
def test_a_flipped_byte_in_an_old_segment_fails_the_read_of_that_record(
    tmp_path: Path, field: str
) -> None:
    written = faults.populate(tmp_path, faults.settings(), count=200)
    assert len(faults.commitlog_segments(tmp_path)) >= 3
    victim = written[3]
    faults.flip_record_byte(tmp_path, victim, field)

    store = faults.open_store(tmp_path, faults.settings())
    try:
        with pytest.raises(CorruptStore, match=f"physical offset {victim.physical_offset}"):
            faults.read_queue(store, faults.TOPIC, victim.queue_id)
        others = [w for w in written if w.queue_id != victim.queue_id]
        grouped = faults.by_queue(others)
        for (topic, queue_id), expected in grouped.items():
            got = faults.read_queue(store, topic, queue_id)
            assert [m.body for m in got] == [w.body for w in expected]
    finally:
        store.close_sync()


def _cut_last_segment(data_dir: Path) -> None:
    last = faults.commitlog_segments(data_dir)[-1]
    faults.cut_file(last, last.stat().st_size // 2)


def _delete_last_segment(data_dir: Path) -> None:
    faults.commitlog_segments(data_dir)[-1].unlink()


@pytest.mark.parametrize(
    "damage", [_cut_last_segment, _delete_last_segment], ids=["cut", "deleted"]
)
def test_a_commit_log_shorter_than_the_flush_checkpoint_is_refused(
    tmp_path: Path, damage: Callable[[Path], None]
) -> None:
    """Bytes below the checkpoint were fsynced; a crash cannot take them back."""
    written = faults.populate(tmp_path, faults.settings(), count=160)
    damage(tmp_path)
    end = sum(p.stat().st_size for p in faults.commitlog_segments(tmp_path)[-1:]) + (
        (len(faults.commitlog_segments(tmp_path)) - 1) * faults.SEGMENT_BYTES
    )

    with pytest.raises(CorruptStore) as refused:
        faults.open_store(tmp_path, faults.settings())
    message = str(refused.value)
    assert f"flush checkpoint {written[-1].end}" in message
    assert "repair" in message

    # repair accepts the loss: every complete record before the damage stays
    store = faults.open_store(tmp_path, faults.settings(), repair=True)
    try:
        assert store.commitlog.end <= end
        faults.assert_reads_exactly(store, [w for w in written if w.end <= store.commitlog.end])
    finally:
        store.close_sync()
