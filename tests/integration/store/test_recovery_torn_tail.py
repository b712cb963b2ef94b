"""Recovery: a torn or garbage tail of the commit log is cut away, exactly, and nothing else.

A crash can leave the last record half written (the process died inside
``pwrite``, or the kernel wrote some pages of it and not others), or leave bytes
after the last record (a file extended with zeros, stale data). Recovery must
truncate exactly those bytes and keep every complete record, readable byte for
byte. The checkpoint is rewound to where an earlier flush left it, as after a real
crash; records above it are the ones a torn write can affect.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import struct
from pathlib import Path

import pytest

from popbroker.store import flushmark
from popbroker.store import format as fmt
from popbroker.store.api import FlushMode
from popbroker.store.local import LocalStore
from tests.integration.store import _proc, faults


def _two_sessions(data_dir: Path) -> tuple[list[faults.Written], list[faults.Written]]:
    """Write, close, write more, close; then rewind the checkpoint to the first close."""
    first = faults.populate(data_dir, faults.settings(), count=120)
    second = faults.populate(data_dir, faults.settings(), count=40, earlier=first)
    faults.set_flush_checkpoint(data_dir, first[-1].end)
    return first, second


@pytest.mark.parametrize("cut_into", [1, 4, 8, 30, 60, -1], ids=lambda n: f"cut{n}")
def test_a_record_cut_short_is_truncated_and_every_complete_record_stays(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, cut_into: int
) -> None:
    first, second = _two_sessions(tmp_path)
    last = second[-1]
    keep = cut_into if cut_into > 0 else last.size - 1
    assert keep < last.size
    path, position = faults.locate(tmp_path, last.physical_offset)
    assert path == faults.commitlog_segments(tmp_path)[-1]
    faults.cut_file(path, position + keep)

    caplog.set_level(logging.INFO)
    store = faults.open_store(tmp_path, faults.settings())
    try:
        assert store.commitlog.end == last.physical_offset
        faults.assert_reads_exactly(store, first + second[:-1])
    finally:
        store.close_sync()
    assert f"truncating {keep} bytes of torn tail at physical offset {last.physical_offset}" in (
        caplog.text
    )


def _garbage(kind: str, size: int) -> bytes:
    rng = random.Random(f"garbage/{kind}")
    if kind == "zeros":
        return bytes(size)
    if kind == "random":
        data = bytearray(rng.randbytes(size))
        data[4] = 0x77  # no valid magic: plainly not a record
        return bytes(data)
    # a plausible header (length in range, record magic) whose CRC cannot match
    return struct.pack(">IB", size, fmt.MAGIC_MESSAGE_V1) + rng.randbytes(size - 5)


@pytest.mark.parametrize("kind", ["zeros", "random", "plausible-header"])
def test_garbage_after_the_last_record_is_truncated(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    written = faults.populate(tmp_path, faults.settings(), count=150)
    tail = faults.commitlog_segments(tmp_path)[-1]
    size = 200
    assert tail.stat().st_size + size <= faults.SEGMENT_BYTES, "no room for garbage"
    faults.append_to_file(tail, _garbage(kind, size))

    caplog.set_level(logging.INFO)
    store = faults.open_store(tmp_path, faults.settings())
    try:
        assert store.commitlog.end == written[-1].end
        faults.assert_reads_exactly(store, written)
    finally:
        store.close_sync()
    assert f"truncating {size} bytes of torn tail at physical offset {written[-1].end}" in (
        caplog.text
    )


@pytest.mark.parametrize("field", ["total_size", "magic", "crc", "queue_offset", "body"])
def test_a_flipped_byte_in_the_last_record_above_the_checkpoint_is_a_torn_tail(
    tmp_path: Path, field: str
) -> None:
    first, second = _two_sessions(tmp_path)
    faults.flip_record_byte(tmp_path, second[-1], field)

    store = faults.open_store(tmp_path, faults.settings())
    try:
        assert store.commitlog.end == second[-1].physical_offset
        faults.assert_reads_exactly(store, first + second[:-1])
    finally:
        store.close_sync()


def test_a_recovered_store_appends_after_the_cut_and_reopens_cleanly(tmp_path: Path) -> None:
    first, second = _two_sessions(tmp_path)
    last = second[-1]
    path, position = faults.locate(tmp_path, last.physical_offset)
    faults.cut_file(path, position + last.size // 2)

    # recovery cuts the torn record; the writer then reuses its queue offset
    more = faults.populate(tmp_path, faults.settings(), count=8, earlier=first + second[:-1])
    assert more[0].physical_offset == last.physical_offset
    store = faults.open_store(tmp_path, faults.settings())
    try:
        faults.assert_reads_exactly(store, first + second[:-1] + more)
    finally:
        store.close_sync()


def test_after_cutting_a_torn_tail_the_store_never_counts_cut_bytes_as_flushed(
    tmp_path: Path,
) -> None:
    """The cut bytes were never flushed; neither memory nor the checkpoint may say so.

    Otherwise SYNC appends landing below the old end could be acknowledged without
    an fsync, and a checkpoint beyond the log's end turns an ordinary torn write in
    the next crash into "damaged below the flush checkpoint", a refused start.
    """
    _first, second = _two_sessions(tmp_path)
    last = second[-1]
    path, position = faults.locate(tmp_path, last.physical_offset)
    faults.cut_file(path, position + last.size - 1)
    settings = faults.settings(flush_mode=FlushMode.SYNC)

    # the checkpoint recovery writes, before any flusher pass could overwrite it
    store = LocalStore.open(tmp_path, settings, start_flusher=False)
    try:
        assert store.commitlog.end == last.physical_offset
        assert store.flusher.flushed_position == store.commitlog.end
        mark = flushmark.read(tmp_path / "checkpoint")
        assert mark.flushed_physical_offset == store.commitlog.end
    finally:
        store.close_sync()

    store = faults.open_store(tmp_path, settings)
    try:
        fsyncs = len(store.flusher.flush_latencies_ms)
        message = dataclasses.replace(
            _proc.message(7, last.queue_id, last.queue_offset), body=b"lands below the old end"
        )
        [result] = asyncio.run(store.append([message]))
        assert result.physical_offset + result.size < last.end
        assert len(store.flusher.flush_latencies_ms) > fsyncs, "acknowledged without fsync"
    finally:
        store.close_sync()
    mark = flushmark.read(tmp_path / "checkpoint")
    assert mark.flushed_physical_offset == result.physical_offset + result.size
