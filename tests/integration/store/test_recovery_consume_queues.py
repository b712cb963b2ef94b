"""Recovery: consume queues are derived data, rebuilt from the commit log when damaged.

A consume queue that lost its tail, a file in the middle of its history, or its
whole directory must read exactly as before once the store reopens: same queue
offsets, same bodies, same physical offsets. Each case runs with a commit log of
one segment (recovery re-reads all of it anyway) and of several segments (recovery
starts at the checkpoint's segment and must notice the gap by itself).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from popbroker.store import format as fmt
from popbroker.store.api import StoredMessage
from popbroker.store.errors import CorruptStore
from tests.integration.store import faults

# 40 messages of ~1.5 KB fit one 64 KiB segment; 260 span several. Four entries per
# consume-queue file, so every queue has several files.
SIZES = pytest.mark.parametrize("count", [40, 260], ids=["one-segment", "many-segments"])
SETTINGS = faults.settings(cq_entries_per_file=4)


def _written_and_snapshot(
    data_dir: Path, count: int
) -> tuple[list[faults.Written], dict[int, list[StoredMessage]]]:
    written = faults.populate(data_dir, SETTINGS, count=count)
    store = faults.open_store(data_dir, SETTINGS)
    try:
        faults.assert_reads_exactly(store, written)
        before = faults.snapshot(store)
    finally:
        store.close_sync()
    return written, before


def _assert_reads_as_before(
    data_dir: Path, written: list[faults.Written], before: dict[int, list[StoredMessage]]
) -> None:
    store = faults.open_store(data_dir, SETTINGS)
    try:
        faults.assert_reads_exactly(store, written)
        assert faults.snapshot(store) == before
    finally:
        store.close_sync()
    # the rebuilt queues were persisted: a second open needs no rebuild and agrees
    store = faults.open_store(data_dir, SETTINGS)
    try:
        assert faults.snapshot(store) == before
    finally:
        store.close_sync()


def _queue_files(data_dir: Path, queue_id: int) -> list[Path]:
    return sorted(faults.consume_queue_dir(data_dir, queue_id).iterdir())


@SIZES
def test_a_consume_queue_cut_in_the_middle_of_its_history_is_rebuilt(
    tmp_path: Path, count: int
) -> None:
    written, before = _written_and_snapshot(tmp_path, count)
    files = _queue_files(tmp_path, 1)
    keep = files[: max(1, len(files) // 2)]
    for path in files[len(keep) :]:
        path.unlink()
    # and cut the last kept file inside an entry
    faults.cut_file(keep[-1], keep[-1].stat().st_size // 2 + 7)

    _assert_reads_as_before(tmp_path, written, before)


@SIZES
def test_a_consume_queue_file_cut_short_before_later_files_is_rebuilt(
    tmp_path: Path, count: int
) -> None:
    written, before = _written_and_snapshot(tmp_path, count)
    files = _queue_files(tmp_path, 2)
    if len(files) < 3:
        pytest.fail(f"need at least 3 consume-queue files, have {len(files)}")
    faults.cut_file(files[0], 5 * fmt.CQ_ENTRY_SIZE)  # a hole in the middle of its history

    _assert_reads_as_before(tmp_path, written, before)


def _zero_entry(data_dir: Path, queue_id: int, queue_offset: int) -> None:
    path = _queue_files(data_dir, queue_id)[0]
    with path.open("r+b") as f:
        f.seek(queue_offset * fmt.CQ_ENTRY_SIZE)
        f.write(bytes(fmt.CQ_ENTRY_SIZE))


@SIZES
def test_a_zeroed_entry_above_the_checkpoint_is_rebuilt(tmp_path: Path, count: int) -> None:
    written, before = _written_and_snapshot(tmp_path, count)
    _zero_entry(tmp_path, 0, 3)
    faults.set_flush_checkpoint(tmp_path, 0)  # as if the crash came before any checkpoint

    _assert_reads_as_before(tmp_path, written, before)


def test_a_zeroed_entry_below_the_checkpoint_fails_the_read_loudly(tmp_path: Path) -> None:
    """Entries below the checkpoint were fsynced; a hole there is outside damage.

    Recovery does not re-read every old entry, so the read must refuse, not skip.
    """
    written, _before = _written_and_snapshot(tmp_path, 260)
    _zero_entry(tmp_path, 0, 3)

    store = faults.open_store(tmp_path, SETTINGS)
    try:
        with pytest.raises(CorruptStore):
            faults.read_queue(store, faults.TOPIC, 0)
        faults.assert_reads_exactly(store, written, skip=[0])
    finally:
        store.close_sync()


@SIZES
def test_a_deleted_consume_queue_directory_is_rebuilt(tmp_path: Path, count: int) -> None:
    written, before = _written_and_snapshot(tmp_path, count)
    shutil.rmtree(faults.consume_queue_dir(tmp_path, 3))

    _assert_reads_as_before(tmp_path, written, before)


@SIZES
def test_all_consume_queues_deleted_are_rebuilt(tmp_path: Path, count: int) -> None:
    written, before = _written_and_snapshot(tmp_path, count)
    shutil.rmtree(tmp_path / "consumequeue")

    _assert_reads_as_before(tmp_path, written, before)


@SIZES
def test_consume_queues_and_their_record_deleted_are_rebuilt(tmp_path: Path, count: int) -> None:
    written, before = _written_and_snapshot(tmp_path, count)
    shutil.rmtree(tmp_path / "consumequeue")
    for name in ("queues.json", "queues.json.bak", "checkpoint"):
        (tmp_path / "config" / name).unlink(missing_ok=True)
        (tmp_path / name).unlink(missing_ok=True)

    _assert_reads_as_before(tmp_path, written, before)


def test_consume_queue_entries_pointing_at_the_wrong_records_fail_the_read(
    tmp_path: Path,
) -> None:
    """Two entries swapped below the checkpoint: each points at a valid record, but not
    the one at its queue offset. The read must refuse rather than hand out the wrong
    message under the wrong offset."""
    written, _before = _written_and_snapshot(tmp_path, 260)
    path = _queue_files(tmp_path, 0)[0]
    raw = bytearray(path.read_bytes())
    size = fmt.CQ_ENTRY_SIZE
    second, third = raw[2 * size : 3 * size], raw[3 * size : 4 * size]
    raw[2 * size : 3 * size], raw[3 * size : 4 * size] = third, second
    path.write_bytes(bytes(raw))

    store = faults.open_store(tmp_path, SETTINGS)
    try:
        with pytest.raises(CorruptStore, match="consume queue"):
            faults.read_queue(store, faults.TOPIC, 0)
        faults.assert_reads_exactly(store, written, skip=[0])
    finally:
        store.close_sync()
