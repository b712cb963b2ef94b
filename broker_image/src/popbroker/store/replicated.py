"""Commit-log bytes as replication moves them (issue 18): what a leader reads out of its
log and what a follower checks before it writes the same bytes at the same physical offsets.

A follower's log is byte for byte its leader's, so both must use the same segment size:
records, end-of-segment fillers and the zeros of a segment's last few bytes arrive exactly
as the leader wrote them. :func:`parse` is the follower's check, pure and all or nothing:
it walks the bytes from their physical offset as recovery walks a log
(``CommitLog.scan``), verifies every record whole (CRC, its own physical offset, every
field), every filler's length and every segment tail, and refuses bytes that end inside a
record. What it returns is the segment-bounded chunks to write and the records to index.
:func:`cut` is the leader's side: the longest prefix of bytes read from its log that ends
on a record or segment boundary (so a frame never carries half a record).
"""

from __future__ import annotations

from dataclasses import dataclass

from popbroker.store import format as fmt
from popbroker.store.errors import InvalidArgument


@dataclass(frozen=True, slots=True)
class ReplicatedBytes:
    """Checked log bytes: ``chunks`` (physical offset, bytes), none crossing a segment
    end, in order; ``records`` every record in them, decoded and verified."""

    chunks: tuple[tuple[int, bytes], ...]
    records: tuple[fmt.Record, ...]


def parse(data: bytes, *, start: int, segment_bytes: int) -> ReplicatedBytes:
    """Check ``data`` as the log bytes from physical offset ``start`` (see the module
    docstring); ``InvalidArgument`` says what is wrong and nothing is returned."""
    chunks: list[tuple[int, bytes]] = []
    records: list[fmt.Record] = []
    position, at = start, 0
    chunk_from = 0
    while at < len(data):
        in_segment = position % segment_bytes
        head = data[at : at + fmt.PREFIX_SIZE]
        found = fmt.probe(head, position_in_segment=in_segment, segment_bytes=segment_bytes)
        if found.kind == "record":
            if at + found.size > len(data):
                raise InvalidArgument(f"replicated bytes end inside the record at {position}")
            raw = data[at : at + found.size]
            try:
                records.append(fmt.decode_record(raw, expected_physical_offset=position))
            except fmt.FormatError as exc:
                raise InvalidArgument(f"replicated record at {position}: {exc}") from exc
            size = found.size
        elif found.kind == "filler" or (found.kind == "end" and found.size > 0):
            size = segment_bytes - in_segment  # a filler, or a tail too short for one
            tail = data[at : at + size]
            if len(tail) != size:
                raise InvalidArgument(f"replicated bytes end inside the segment tail at {position}")
            if found.kind == "end" and tail != bytes(size):
                raise InvalidArgument(f"segment tail at {position} is not zeros")
        else:
            reason = found.reason or "zeros where a record or filler must be"
            raise InvalidArgument(f"replicated bytes at {position}: {reason}")
        at += size
        position += size
        if position % segment_bytes == 0:  # a segment ends here: its chunk is complete
            chunks.append((start + chunk_from, data[chunk_from:at]))
            chunk_from = at
    if chunk_from < at:
        chunks.append((start + chunk_from, data[chunk_from:at]))
    return ReplicatedBytes(tuple(chunks), tuple(records))


def cut(data: bytes, *, start: int, segment_bytes: int) -> bytes:
    """The longest prefix of ``data`` (read from the log at ``start``) that ends on a
    record or segment boundary; the log's own bytes, so not re-verified here."""
    position, at, good = start, 0, 0
    while at < len(data):
        in_segment = position % segment_bytes
        head = data[at : at + fmt.PREFIX_SIZE]
        found = fmt.probe(head, position_in_segment=in_segment, segment_bytes=segment_bytes)
        if found.kind == "record":
            size = found.size
        elif found.kind == "filler" or (found.kind == "end" and found.size > 0):
            size = segment_bytes - in_segment
        else:
            break
        if at + size > len(data):
            break
        at += size
        position += size
        good = at
    return data[:good]
