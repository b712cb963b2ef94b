"""Consume queues: per (topic, queue) index of 20-byte entries into the commit log.

Entry ``n`` describes the record with queue offset ``n`` (layout in
``popbroker.store.format``). Files live in ``consumequeue/<topic>/<queue_id>/`` and
hold ``cq_entries_per_file`` entries each. The queue's ``max_queue_offset`` is the
number of entries written (the next offset to assign); ``min_queue_offset`` is the
first entry whose record still exists in the commit log.

Consume queues are derived data: they are never fsynced on the write path and are
rebuilt from the commit log after a crash (``popbroker.store.local``). Entries are
written only by the dispatcher, in commit-log order, so within a queue physical
offsets strictly increase.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from popbroker.store import format as fmt
from popbroker.store.segments import SegmentedFile
from popbroker.values import per_message


@per_message
class Entry:
    queue_offset: int
    physical_offset: int
    size: int
    tag_hash: int


class ConsumeQueue:
    """The index of one (topic, queue)."""

    def __init__(
        self, directory: Path, *, topic: str, queue_id: int, entries_per_file: int
    ) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.file = SegmentedFile(directory, entries_per_file * fmt.CQ_ENTRY_SIZE)
        for base in self.file.bases[:-1]:
            hole = self.file.file_end(base)
            if hole < base + self.file.segment_bytes:
                # a file cut short before later ones: everything from the hole on is
                # suspect; drop it and let recovery re-index from the commit log
                self.file.truncate(hole)
                break
        end = self.file.write_position
        if end % fmt.CQ_ENTRY_SIZE:
            self.file.truncate(end - end % fmt.CQ_ENTRY_SIZE)  # torn last entry
        self.min_queue_offset = self.file.min_position // fmt.CQ_ENTRY_SIZE

    @property
    def max_queue_offset(self) -> int:
        return self.file.write_position // fmt.CQ_ENTRY_SIZE

    def append(self, entry: Entry) -> None:
        if entry.queue_offset != self.max_queue_offset:
            raise ValueError(
                f"{self.topic}/{self.queue_id}: entry {entry.queue_offset} "
                f"but next is {self.max_queue_offset}"
            )
        self.file.append(fmt.encode_cq_entry(entry.physical_offset, entry.size, entry.tag_hash))

    def append_many(self, queue_offset: int, entries: Sequence[tuple[int, int, int]]) -> None:
        """Append ``(physical_offset, size, tag_hash)`` entries with consecutive queue offsets
        from ``queue_offset``: one write per file they fall in, not one per entry.

        A failure (``StoreFull``) leaves the entries of the files already written and none
        of the failing file's; ``max_queue_offset`` tells how far it got.
        """
        if queue_offset != self.max_queue_offset:
            raise ValueError(
                f"{self.topic}/{self.queue_id}: entry {queue_offset} "
                f"but next is {self.max_queue_offset}"
            )
        per_file = self.file.segment_bytes // fmt.CQ_ENTRY_SIZE
        pack = fmt.CQ_ENTRY.pack
        start = 0
        while start < len(entries):
            room = per_file - (queue_offset + start) % per_file
            chunk = entries[start : start + room]
            self.file.append(b"".join([pack(*entry) for entry in chunk]))
            start += len(chunk)

    def start_at(self, queue_offset: int) -> None:
        """Make an empty queue begin at ``queue_offset`` (its head was lost to retention)."""
        self.file.start_position(queue_offset * fmt.CQ_ENTRY_SIZE)
        self.min_queue_offset = queue_offset

    def begin_at(self, queue_offset: int) -> None:
        """Make an empty queue begin at ``queue_offset`` durably (a follower whose log begins
        where its leader's retention left it, issue 18): the file that holds the offset is
        written with :data:`~popbroker.store.format.CQ_BELOW_LOG` entries below it, which
        read as records retention took: :meth:`advance_min` moves past them when the
        store opens again."""
        if self.file.bases or self.max_queue_offset:
            raise ValueError(f"{self.topic}/{self.queue_id}: begin_at on a non-empty queue")
        position = queue_offset * fmt.CQ_ENTRY_SIZE
        base = position - position % self.file.segment_bytes
        self.file.start_position(base)
        below = fmt.encode_cq_entry(*fmt.CQ_BELOW_LOG)
        self.file.append(below * ((position - base) // fmt.CQ_ENTRY_SIZE))
        self.file.flush()
        self.min_queue_offset = queue_offset

    def entries(self, queue_offset: int, count: int) -> list[Entry]:
        """Up to ``count`` entries from ``queue_offset`` (fewer at a file end or the tail)."""
        return [
            Entry(queue_offset + i, physical, size, hashed)
            for i, (physical, size, hashed) in enumerate(self.raw_entries(queue_offset, count))
        ]

    def raw_entries(self, queue_offset: int, count: int) -> list[tuple[int, int, int]]:
        """:meth:`entries` as ``(physical_offset, size, tag_hash)`` tuples, consecutive from
        ``queue_offset`` (bulk readers)."""
        result: list[tuple[int, int, int]] = []
        while count > 0 and queue_offset < self.max_queue_offset:
            raw = self.file.read(queue_offset * fmt.CQ_ENTRY_SIZE, count * fmt.CQ_ENTRY_SIZE)
            usable = len(raw) // fmt.CQ_ENTRY_SIZE
            if usable == 0:
                break
            view = memoryview(raw)[: usable * fmt.CQ_ENTRY_SIZE]
            result.extend(fmt.CQ_ENTRY.iter_unpack(view))
            queue_offset += usable
            count -= usable
        return result

    def last(self) -> Entry | None:
        if self.max_queue_offset <= self.min_queue_offset:
            return None
        found = self.entries(self.max_queue_offset - 1, 1)
        return found[0] if found else None

    def truncate_to(self, queue_offset: int) -> None:
        self.file.truncate(queue_offset * fmt.CQ_ENTRY_SIZE)

    def advance_min(self, commit_log_min: int) -> int:
        """Move ``min_queue_offset`` past entries whose records retention deleted."""
        done = False
        while not done and self.min_queue_offset < self.max_queue_offset:
            batch = self.entries(self.min_queue_offset, 256)
            if not batch:
                break
            for entry in batch:
                if entry.physical_offset >= commit_log_min:
                    done = True
                    break
                self.min_queue_offset = entry.queue_offset + 1
        self.file.delete_before(self.min_queue_offset * fmt.CQ_ENTRY_SIZE)
        return self.min_queue_offset

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()

    def destroy(self) -> None:
        self.file.delete_all()
        self.file.close()
