"""The commit log: every record of every topic, appended in one segmented stream.

``place`` writes a batch of records (rolling segments with an end-of-segment
filler when a record does not fit), ``read`` returns one verified record, ``scan``
walks records from a position for recovery, dispatch rebuilds and the dump tool,
and ``recover`` verifies the tail after a crash.

Recovery, in order (see also ``popbroker.store.local``):

1. Start at the segment holding the last flush checkpoint (everything below it was
   fsynced before the checkpoint was written). A log that ends below the checkpoint
   lost fsynced bytes (a file cut short or deleted): refuse, as in 3a.
2. Walk records, verifying length, CRC and self-declared position.
3. At the first bad record:
   a. if it lies below the checkpoint, durable data is damaged: refuse to start
      (``CorruptStore``) unless ``repair`` is set;
   b. if a valid record or a later segment follows it, the damage is in the middle
      of the log, not a torn tail: refuse likewise;
   c. otherwise it is a torn tail: truncate there and report how many bytes went.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from popbroker.store import format as fmt
from popbroker.store.errors import CorruptStore, StoreFull
from popbroker.store.segments import SegmentedFile
from popbroker.values import per_message

log = logging.getLogger(__name__)

READ_GAP_BYTES = 64 * 1024  # bulk reads: records this close are read in one span
READ_SPAN_BYTES = 4 * 1024 * 1024  # ... of at most this many bytes


@per_message
class RecordFields:
    """Everything of a record but its position, already encoded to bytes."""

    topic: bytes
    queue_id: int
    queue_offset: int
    flags: int
    born_timestamp_ms: int
    store_timestamp_ms: int
    reconsume_times: int
    born_host: bytes
    properties: bytes
    body: bytes

    @property
    def size(self) -> int:
        return fmt.encoded_size(
            topic=self.topic, born_host=self.born_host, properties=self.properties, body=self.body
        )

    def encode_at(self, physical_offset: int) -> bytes:
        return fmt.encode_record(
            physical_offset=physical_offset,
            queue_id=self.queue_id,
            queue_offset=self.queue_offset,
            flags=self.flags,
            born_timestamp_ms=self.born_timestamp_ms,
            store_timestamp_ms=self.store_timestamp_ms,
            reconsume_times=self.reconsume_times,
            topic=self.topic,
            born_host=self.born_host,
            properties=self.properties,
            body=self.body,
        )


@per_message
class UnplacedAt:
    """An unplaced record (``format.encode_unplaced``) with its queue offset and store time;
    the commit log gives it its position."""

    raw: bytes
    queue_offset: int
    store_timestamp_ms: int

    @property
    def size(self) -> int:
        return len(self.raw)

    def encode_at(self, physical_offset: int) -> bytes | bytearray:
        return fmt.place_unplaced(
            self.raw,
            physical_offset=physical_offset,
            queue_offset=self.queue_offset,
            store_timestamp_ms=self.store_timestamp_ms,
        )


Placeable = RecordFields | UnplacedAt


@per_message
class Placed:
    physical_offset: int
    size: int


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    verified_from: int
    end: int
    truncated_bytes: int
    records_verified: int


class CommitLog:
    """The segmented commit log in ``directory``."""

    def __init__(self, directory: Path, segment_bytes: int) -> None:
        self.file = SegmentedFile(directory, segment_bytes)
        self.segment_bytes = segment_bytes

    @property
    def min_offset(self) -> int:
        return self.file.min_position

    @property
    def end(self) -> int:
        return self.file.write_position

    def place(self, records: Sequence[Placeable]) -> list[Placed]:
        """Write ``records`` contiguously; all or none (a failure truncates the batch away)."""
        start = self.file.write_position
        placed: list[Placed] = []
        chunk: list[bytes | bytearray] = []
        chunk_len = 0
        try:
            for record in records:
                size = record.size
                if size > self.segment_bytes - fmt.FILLER_MIN:
                    raise ValueError("record larger than a segment")
                position = self.file.write_position + chunk_len
                if chunk_len and position % self.segment_bytes == 0:
                    # the chunk ends its segment exactly: write it before starting the next
                    self._write(chunk, chunk_len)
                    chunk, chunk_len = [], 0
                rest = self.segment_bytes - position % self.segment_bytes
                if size > rest:
                    if rest >= fmt.FILLER_MIN:
                        chunk.append(fmt.encode_filler(rest))
                    chunk_len += rest
                    self._write(chunk, chunk_len)
                    chunk, chunk_len = [], 0
                    position = self.file.write_position
                chunk.append(record.encode_at(position))
                chunk_len += size
                placed.append(Placed(position, size))
            self._write(chunk, chunk_len)
        except (StoreFull, OSError, ValueError):
            self.file.truncate(start)  # all or none: drop chunks already written
            raise
        return placed

    def _write(self, chunk: list[bytes | bytearray], chunk_len: int) -> None:
        if not chunk_len:
            return
        data = b"".join(chunk)
        if len(data) < chunk_len:  # a filler shorter than FILLER_MIN: leave zeros
            data += bytes(chunk_len - len(data))
        self.file.append(data)

    def read(self, physical_offset: int, size: int) -> fmt.Record:
        """Read and verify one record; ``CorruptStore`` if it fails verification."""
        return fmt.Record(*self.read_verified(physical_offset, size)[1])

    def read_verified(self, physical_offset: int, size: int) -> tuple[bytes, fmt.RecordFields]:
        """:meth:`read` as the record's bytes as stored and its fields as a tuple in
        ``Record``'s order (hot readers: no object per record)."""
        raw = self.file.read(physical_offset, size)
        return raw, _verified(raw, physical_offset)

    def read_verified_many(
        self, extents: Sequence[tuple[int, int]]
    ) -> list[tuple[bytes, fmt.RecordFields]]:
        """:meth:`read_verified` of each ``(physical_offset, size)``, in order, with nearby
        records read as one span (as :meth:`read_many`): a pop reads a batch of one queue's
        records, which lie close together, and one system call per record cost more than
        slicing them out of a span. Each record is verified on its own, so a damaged one
        (or one a short span cut) raises ``CorruptStore`` naming it."""
        found: list[tuple[bytes, fmt.RecordFields]] = []
        index = 0
        while index < len(extents):
            last = self._span_end(extents, index)
            start = extents[index][0]
            span = self.file.read(start, extents[last - 1][0] + extents[last - 1][1] - start)
            for physical_offset, size in extents[index:last]:
                raw = span[physical_offset - start : physical_offset - start + size]
                found.append((raw, _verified(raw, physical_offset)))
            index = last
        return found

    def read_many(self, extents: Sequence[tuple[int, int]]) -> fmt.SpanColumns:
        """The records at ``(physical_offset, size)`` of each extent, in order, verified as
        :meth:`read` verifies them, as columns (bulk readers).

        Records of one queue sit close together in the log (a revive queue's records lie
        between the other queues' ones), and a system call costs more than copying the
        bytes between them: records no further than ``READ_GAP_BYTES`` apart in the same
        segment are read as one span of at most ``READ_SPAN_BYTES`` and decoded together
        (:func:`format.decode_span`). A span that fails any check is decoded record by
        record, which raises ``CorruptStore`` naming the first damaged record.
        """
        merged = fmt.SpanColumns([], [], [], [], [], [])
        index = 0
        while index < len(extents):
            last = self._span_end(extents, index)
            start = extents[index][0]
            span_extents = extents[index:last]
            span = self.file.read(start, span_extents[-1][0] + span_extents[-1][1] - start)
            columns = fmt.decode_span(span, span_extents, span_position=start)
            if columns is None:
                columns = self._decode_one_by_one(span, span_extents, span_position=start)
            merged.queue_ids.extend(columns.queue_ids)
            merged.queue_offsets.extend(columns.queue_offsets)
            merged.stored_ms.extend(columns.stored_ms)
            merged.topics.extend(columns.topics)
            merged.properties.extend(columns.properties)
            merged.bodies.extend(columns.bodies)
            index = last
        return merged

    def _span_end(self, extents: Sequence[tuple[int, int]], index: int) -> int:
        """The end index of the span of nearby records starting at ``extents[index]``."""
        start, size = extents[index]
        limit = min(
            start + READ_SPAN_BYTES, start - start % self.segment_bytes + self.segment_bytes
        )
        end, last = start + size, index + 1
        while last < len(extents):
            position, next_size = extents[last]
            if not end <= position <= end + READ_GAP_BYTES or position + next_size > limit:
                break
            end = position + next_size
            last += 1
        return last

    @staticmethod
    def _decode_one_by_one(
        span: bytes, extents: Sequence[tuple[int, int]], *, span_position: int
    ) -> fmt.SpanColumns:
        columns = fmt.SpanColumns([], [], [], [], [], [])
        for physical_offset, size in extents:
            at = physical_offset - span_position
            fields = _verified(span[at : at + size], physical_offset)
            columns.queue_ids.append(fields[2])
            columns.queue_offsets.append(fields[3])
            columns.stored_ms.append(fields[6])
            columns.topics.append(fields[8])
            columns.properties.append(fields[10])
            columns.bodies.append(fields[11])
        return columns

    def scan(self, start: int) -> Iterator[fmt.Record]:
        """Verified records from ``start`` (a record boundary) to the end."""
        position = max(start, self.min_offset)
        while position < self.end:
            kind, size, record, reason = self._at(position)
            if kind == "record":
                assert record is not None
                yield record
                position += size
            elif kind in ("filler", "end"):
                position = position - position % self.segment_bytes + self.segment_bytes
            else:
                raise CorruptStore(f"commit log damaged at physical offset {position}: {reason}")

    def _at(self, position: int) -> tuple[str, int, fmt.Record | None, str]:
        in_segment = position % self.segment_bytes
        head = self.file.read(position, fmt.PREFIX_SIZE)
        found = fmt.probe(head, position_in_segment=in_segment, segment_bytes=self.segment_bytes)
        if found.kind != "record":
            if found.kind == "end" and position < self._segment_data_end(position):
                # zeros followed by more data in this file: a hole, not an end
                return "bad", 0, None, "zero bytes inside written data"
            return found.kind, found.size, None, found.reason
        raw = self.file.read(position, found.size)
        try:
            record = fmt.decode_record(raw, expected_physical_offset=position)
        except fmt.FormatError as exc:
            return "bad", found.size, None, str(exc)
        return "record", found.size, record, ""

    def _segment_data_end(self, position: int) -> int:
        base = position - position % self.segment_bytes
        if base not in self.file.bases:
            return position
        end = self.file.file_end(base)
        raw = self.file.read(position, end - position)
        return position + len(raw.rstrip(b"\x00"))

    def recover(self, *, checkpoint: int, repair: bool = False) -> RecoveryReport:
        """Verify from the checkpoint's segment to the end; see the module docstring."""
        if checkpoint > self.end:  # fsynced bytes are gone: a file was cut or deleted
            self._judge_short_log(checkpoint, repair=repair)
        checkpoint = min(max(checkpoint, self.min_offset), self.end)
        start = max(checkpoint - checkpoint % self.segment_bytes, self.min_offset)
        position, verified = start, 0
        while position < self.end:
            kind, size, _record, reason = self._at(position)
            if kind == "record":
                verified += 1
                position += size
                continue
            if kind in ("filler", "end"):
                next_base = position - position % self.segment_bytes + self.segment_bytes
                if kind == "end" and next_base > self.end:
                    break
                position = next_base
                continue
            self._judge_damage(position, size, reason, checkpoint=checkpoint, repair=repair)
            break
        truncated = self.end - position
        if truncated:
            log.warning(
                "commit log: truncating %d bytes of torn tail at physical offset %d",
                truncated,
                position,
            )
            self.file.truncate(position)
        self.file.sync_from(start)  # what was verified is durable before it counts as flushed
        return RecoveryReport(start, self.end, truncated, verified)

    def _judge_short_log(self, checkpoint: int, *, repair: bool) -> None:
        problem = (
            f"commit log ends at physical offset {self.end}, below the flush checkpoint "
            f"{checkpoint}: fsynced data is missing (a segment file was cut short or deleted)"
        )
        if not repair:
            raise CorruptStore(
                problem + "; refusing to start. Restore the volume, or start with --repair "
                "to accept the loss."
            )
        log.error("%s; --repair given: continuing from the end", problem)

    def _judge_damage(
        self, position: int, size: int, reason: str, *, checkpoint: int, repair: bool
    ) -> None:
        where = f"physical offset {position} ({reason})"
        if position < checkpoint:
            problem = f"commit log damaged below the flush checkpoint {checkpoint} at {where}"
        elif self._valid_after(position, size):
            problem = f"commit log damaged in the middle, valid records follow, at {where}"
        else:
            return
        if not repair:
            raise CorruptStore(
                problem + "; refusing to start. Restore the volume, or start with --repair "
                "to truncate the log there (records after it will be lost)."
            )
        log.error("%s; --repair given: truncating", problem)

    def _valid_after(self, position: int, size: int) -> bool:
        base = position - position % self.segment_bytes
        if any(b > base for b in self.file.bases):
            return True
        if size > 0 and self._at(position + size)[0] == "record":
            return True
        return self._any_record_after(position)

    def _any_record_after(self, position: int) -> bool:
        """Whether a verifiable record starts anywhere after ``position`` in its segment.

        A damaged length or magic byte hides where the next record starts, so look
        for one: every record names its own physical offset and is CRC-covered, so a
        record that verifies at the position it names is real data behind the damage
        (rule 3b), not the remains of a torn write. Only runs on the damage path.
        """
        base = position - position % self.segment_bytes
        data = self.file.read(position, self.file.file_end(base) - position)
        magic = bytes([fmt.MAGIC_MESSAGE_V1])
        index = data.find(magic, fmt.FILLER_MIN)  # the magic is byte 4 of a record
        while index != -1:
            start = index - 4
            head = data[start : start + fmt.PREFIX_SIZE]
            found = fmt.probe(
                head,
                position_in_segment=(position + start) % self.segment_bytes,
                segment_bytes=self.segment_bytes,
            )
            if found.kind == "record" and start + found.size <= len(data):
                try:
                    fmt.decode_record(
                        data[start : start + found.size],
                        expected_physical_offset=position + start,
                    )
                except fmt.FormatError:
                    pass
                else:
                    return True
            index = data.find(magic, index + 1)
        return False

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def _verified(raw: bytes, physical_offset: int) -> fmt.RecordFields:
    """The fields of the record ``raw`` read at ``physical_offset``; ``CorruptStore`` naming
    that position when it fails verification (every reader of the log reports it so)."""
    try:
        return fmt.decode_fields(raw, expected_physical_offset=physical_offset)
    except fmt.FormatError as exc:
        raise CorruptStore(
            f"commit log record at physical offset {physical_offset} is damaged: {exc}"
        ) from exc
