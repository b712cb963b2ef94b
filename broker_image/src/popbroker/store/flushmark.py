"""The flush mark (the ``checkpoint`` file): how far the commit log is durable and indexed.

One 32-byte file, rewritten in place and fdatasync'ed (a write this small lands
within one sector, so it is either old or new)::

    0   4  magic b"PFCP"
    4   8  flushed_physical_offset     i64, every commit-log byte below it was fsynced
    12  8  dispatched_physical_offset  i64, every record below it is in a fsynced consume queue
    20  8  written_at_ms               i64
    28  4  crc32 of bytes [0, 28)

A missing or damaged checkpoint reads as zeros: recovery then verifies and
re-indexes the whole log, which is slow but never wrong.
"""

from __future__ import annotations

import logging
import os
import struct
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

_LAYOUT = struct.Struct(">4sqqq")
MAGIC = b"PFCP"


@dataclass(frozen=True, slots=True)
class FlushMark:
    flushed_physical_offset: int = 0
    dispatched_physical_offset: int = 0


def write(path: Path, mark: FlushMark) -> None:
    body = _LAYOUT.pack(
        MAGIC,
        mark.flushed_physical_offset,
        mark.dispatched_physical_offset,
        time.time_ns() // 10**6,
    )
    data = body + struct.pack(">I", zlib.crc32(body))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, data, 0)
        os.fdatasync(fd)
    finally:
        os.close(fd)


def read(path: Path) -> FlushMark:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return FlushMark()
    if len(data) < _LAYOUT.size + 4:
        log.warning("checkpoint %s is short; verifying the whole commit log", path)
        return FlushMark()
    body, (crc,) = data[: _LAYOUT.size], struct.unpack_from(">I", data, _LAYOUT.size)
    magic, flushed, dispatched, _written = _LAYOUT.unpack(body)
    if magic != MAGIC or zlib.crc32(body) != crc or flushed < 0 or dispatched < 0:
        log.warning("checkpoint %s is damaged; verifying the whole commit log", path)
        return FlushMark()
    return FlushMark(flushed, dispatched)
