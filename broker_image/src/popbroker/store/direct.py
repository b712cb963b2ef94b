"""Direct reads: the popack role reads the store's files itself, read-only.

In a broker pod the store role owns the data volume and popack reaches it over
the store's Unix socket. A ``read`` over that socket costs both processes a
gRPC call and the store a decode of every record that popack then decodes
again; DESIGN §3 leaves the choice between that and reading the store's
segments directly "by measurement" (the figures are in
``docs/design/2026-11-28-direct-reads.md``). :class:`DirectReads` is the second
way: it answers ``StoreApi.read`` from the consume-queue and commit-log files
in the store's data directory, mounted in both containers, and the store is
asked only when a direct read cannot be sure of its answer.

What makes a direct read as good as the store's (``popbroker.store.api``'s
invariants):

* consume-queue entries are written only by the store's dispatcher, after the
  record is written (``ASYNC``) or flushed (``SYNC``), so an entry in a file is
  an entry the store would serve;
* every record is verified (length, CRC, the physical offset it says it was
  written at) and must be the record the entry names (topic, queue id, queue
  offset), so a half-written entry, a file being truncated or deleted, or a
  directory that is not the store's cannot produce a wrong message;
* files are opened for one read and closed after it: no descriptor outlives a
  retention delete or a topic's re-creation.

``read`` (and ``bounds``) returns ``None`` -- ask the store -- whenever it
cannot answer as the store would: an unknown or empty queue, an offset outside the files, a record
that does not verify or whose segment is gone (retention), a bad argument (the
store names it). :class:`popbroker.store.wire.client.RemoteStore` asks it
first when given one (``popbroker popack --data-dir``).

Layout (``popbroker.store.local``): ``commitlog/<base>`` segments of
``segment_bytes``; ``consumequeue/<topic>/<queue_id>/<base>`` of
``cq_entries_per_file`` 20-byte entries, each file named after the stream
position of its first byte. The sizes come from the store's ``info``.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from popbroker.store import filters
from popbroker.store import format as fmt
from popbroker.store.api import (
    MAX_READ_COUNT,
    QueueBounds,
    ReadResult,
    ReadStatus,
    StoredMessage,
)
from popbroker.store.errors import InvalidArgument, UnknownTopic
from popbroker.store.segments import segment_name

MAX_REMEMBERED_ABSENT = 4096
_ABSENT = (ReadStatus.NO_MESSAGE_IN_QUEUE, ReadStatus.NO_SUCH_QUEUE)

_R = TypeVar("_R", ReadResult | None, QueueBounds | None)

# (inode, mtime, size) of config/metadata.json: the store replaces the file (a new inode)
# on every config change, so an unchanged stamp means an unchanged set of topics.
ConfigStamp = tuple[int, int, int]


@dataclass
class DirectReadCounts:
    """How many reads were answered from the files and how many went to the store."""

    answered: int = 0
    deferred: int = 0


class _Unsure(Exception):
    """A direct read met something only the store can judge; it is asked instead."""


@dataclass
class _Segments:
    """The files of one read, opened on first use and closed when the read ends."""

    directory: Path
    fds: dict[int, int] = field(default_factory=dict)

    def fd(self, base: int) -> int:
        fd = self.fds.get(base)
        if fd is None:
            try:
                fd = os.open(self.directory / segment_name(base), os.O_RDONLY)
            except FileNotFoundError:
                raise _Unsure from None
            self.fds[base] = fd
        return fd

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


class _Queue:
    """One consume queue's files as listed at the start of a read (closed after it)."""

    def __init__(self, directory: Path, bases: list[int]) -> None:
        self.bases = bases
        self.files = _Segments(directory)

    @classmethod
    def listed(cls, directory: Path) -> _Queue | None:
        try:
            bases = sorted(int(name) for name in os.listdir(directory))
        except FileNotFoundError:
            return None
        return cls(directory, bases) if bases else None

    @property
    def first_offset(self) -> int:
        return self.bases[0] // fmt.CQ_ENTRY_SIZE

    def high(self, file_bytes: int) -> int:
        """The next queue offset the dispatcher will write: the end of the last file."""
        last = self.bases[-1]
        size = os.fstat(self.files.fd(last)).st_size
        if size > file_bytes:
            raise _Unsure  # not a queue file of this layout
        return (last + size) // fmt.CQ_ENTRY_SIZE

    def entries(self, queue_offset: int, count: int, file_bytes: int) -> list[tuple[int, int, int]]:
        """Up to ``count`` (at most 256) entries from ``queue_offset``, within one file;
        never none (``_Unsure`` instead)."""
        position = queue_offset * fmt.CQ_ENTRY_SIZE
        base = self.bases[bisect.bisect_right(self.bases, position) - 1]
        if position - base >= file_bytes:
            raise _Unsure  # a file missing between two others
        size = min(min(count, 256) * fmt.CQ_ENTRY_SIZE, base + file_bytes - position)
        raw = os.pread(self.files.fd(base), size, position - base)
        usable = len(raw) // fmt.CQ_ENTRY_SIZE
        if usable == 0:
            raise _Unsure  # shorter than its listing said: truncated meanwhile
        return list(fmt.CQ_ENTRY.iter_unpack(memoryview(raw)[: usable * fmt.CQ_ENTRY_SIZE]))

    def physical_at(self, queue_offset: int, file_bytes: int) -> int:
        return self.entries(queue_offset, 1, file_bytes)[0][0]

    def close(self) -> None:
        self.files.close()


class DirectReads:
    """``StoreApi.read`` from the files of the store in ``data_dir`` (module docstring)."""

    def __init__(self, data_dir: Path, *, segment_bytes: int, cq_entries_per_file: int) -> None:
        if segment_bytes <= 0 or cq_entries_per_file <= 0:
            raise ValueError("segment_bytes and cq_entries_per_file must be positive")
        self.data_dir = data_dir
        self.segment_bytes = segment_bytes
        self.cq_file_bytes = cq_entries_per_file * fmt.CQ_ENTRY_SIZE
        self.counts = DirectReadCounts()
        self._lows: dict[tuple[str, int], int] = {}
        self._absent: dict[tuple[str, int], tuple[ConfigStamp, ReadStatus]] = {}

    def config_stamp(self) -> ConfigStamp | None:
        """The store's config file as it is now (take it before asking the store)."""
        try:
            st = os.stat(self.data_dir / "config" / "metadata.json")
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def learn_absent(
        self, topic: str, queue_id: int, *, status: ReadStatus, stamp: ConfigStamp | None
    ) -> None:
        """The store answered ``status`` for a queue that has no files, under the config
        ``stamp`` taken before it was asked. Until the config changes or the queue gets
        files, the files can give the same answer: an idle revive queue or a retry topic
        that does not exist yet costs no call to the store."""
        if stamp is None or status not in _ABSENT:
            return
        if len(self._absent) >= MAX_REMEMBERED_ABSENT:
            self._absent.clear()
        self._absent[(topic, queue_id)] = (stamp, status)

    def _absent_status(self, topic: str, queue_id: int) -> ReadStatus | None:
        known = self._absent.get((topic, queue_id))
        if known is None:
            return None
        stamp, status = known
        if self.config_stamp() != stamp:
            del self._absent[(topic, queue_id)]
            return None
        return status

    def read(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        *,
        max_count: int,
        tag_filter: str = "*",
        max_scan: int = 800,
    ) -> ReadResult | None:
        """What the store's ``read`` would answer, or ``None`` to ask the store."""
        result = None
        if 1 <= max_count <= MAX_READ_COUNT and max_scan >= max_count and queue_offset >= 0:
            try:
                result = self._read(
                    topic,
                    queue_id,
                    queue_offset=queue_offset,
                    max_count=max_count,
                    tag_filter=tag_filter,
                    max_scan=max_scan,
                )
            except (_Unsure, OSError, ValueError, InvalidArgument):
                result = None  # a bad filter, a name that is not a path: the store names it
        return self._counted(result)

    def bounds(self, topic: str, queue_id: int) -> QueueBounds | None:
        """What the store's ``bounds`` would answer, or ``None``; ``UnknownTopic`` as the
        store raised it for a queue without files (``learn_absent``)."""
        result = None
        queue = None
        try:
            queue = _Queue.listed(self.data_dir / "consumequeue" / topic / str(queue_id))
            absent = self._absent_status(topic, queue_id) if queue is None else None
            if absent is ReadStatus.NO_SUCH_QUEUE:
                self.counts.answered += 1
                raise UnknownTopic(f"topic {topic!r} has no queue {queue_id}")
            if absent is ReadStatus.NO_MESSAGE_IN_QUEUE:
                result = QueueBounds(topic, queue_id, 0, 0)
            if queue is not None:
                high = queue.high(self.cq_file_bytes)
                if high > 0:
                    low = self._low(queue, (topic, queue_id), first=queue.first_offset, high=high)
                    result = QueueBounds(topic, queue_id, low, high)
        except (_Unsure, OSError, ValueError):
            result = None
        finally:
            if queue is not None:
                queue.close()
        return self._counted(result)

    def _counted(self, result: _R) -> _R:
        if result is None:
            self.counts.deferred += 1
        else:
            self.counts.answered += 1
        return result

    def _read(
        self,
        topic: str,
        queue_id: int,
        *,
        queue_offset: int,
        max_count: int,
        tag_filter: str,
        max_scan: int,
    ) -> ReadResult | None:
        parsed = filters.parse_filter(tag_filter)
        queue = _Queue.listed(self.data_dir / "consumequeue" / topic / str(queue_id))
        if queue is None:  # no such queue, or never written: what the store said, if known
            status = self._absent_status(topic, queue_id)
            return None if status is None else ReadResult(status, (), 0, 0, 0)
        log = _Segments(self.data_dir / "commitlog")
        try:
            first, high = queue.first_offset, queue.high(self.cq_file_bytes)
            if high == 0 or not first <= queue_offset <= high:
                return None  # empty, retention or a re-created topic: the store decides
            low = self._low(queue, (topic, queue_id), first=first, high=high)
            if queue_offset < low:
                return None  # retention took it: the store answers OFFSET_TOO_SMALL
            if queue_offset == high:
                return ReadResult(ReadStatus.OFFSET_OVERFLOW_ONE, (), queue_offset, low, high)
            hashes = parsed.hashes
            found: list[StoredMessage] = []
            next_offset = queue_offset
            scan_end = min(queue_offset + max_scan, high)
            while next_offset < scan_end and len(found) < max_count:
                for physical, size, hashed in queue.entries(
                    next_offset, scan_end - next_offset, self.cq_file_bytes
                ):
                    entry_offset = next_offset
                    next_offset += 1
                    if not parsed.matches_hash(hashed, hashes):
                        continue
                    message = self._message(
                        log, (topic, queue_id, entry_offset), physical=physical, size=size
                    )
                    if not parsed.matches_tag(message.tag):
                        continue  # a hash collision
                    found.append(message)
                    if len(found) >= max_count:
                        break
        finally:
            queue.close()
            log.close()
        status = ReadStatus.FOUND if found else ReadStatus.NO_MATCHED_MESSAGE
        return ReadResult(status, tuple(found), next_offset, low, high)

    def _low(self, queue: _Queue, key: tuple[str, int], *, first: int, high: int) -> int:
        """The queue's minimum as the store keeps it: its first entry whose record is still
        in the commit log (retention deletes whole commit-log segments, and consume-queue
        files only once all their entries are gone). Cached per queue, checked each time."""
        try:
            log_min = min(int(name) for name in os.listdir(self.data_dir / "commitlog"))
        except ValueError:
            raise _Unsure from None  # no segment at all
        cached = self._lows.get(key)
        if cached is not None and first <= cached <= high:
            below_ok = (
                cached == first or queue.physical_at(cached - 1, self.cq_file_bytes) < log_min
            )
            at_ok = cached == high or queue.physical_at(cached, self.cq_file_bytes) >= log_min
            if below_ok and at_ok:
                return cached
        low = first
        while low < high:
            entries = queue.entries(low, high - low, self.cq_file_bytes)
            kept = next((i for i, e in enumerate(entries) if e[0] >= log_min), None)
            if kept is not None:
                low += kept
                break
            low += len(entries)
        self._lows[key] = low
        return low

    def _message(
        self, log: _Segments, entry: tuple[str, int, int], *, physical: int, size: int
    ) -> StoredMessage:
        """The verified record an entry names, checked to be that entry's: ``entry`` is its
        (topic, queue id, queue offset)."""
        base = physical - physical % self.segment_bytes
        if size <= 0 or physical - base + size > self.segment_bytes:
            raise _Unsure
        raw = os.pread(log.fd(base), size, physical - base)
        try:
            fields = fmt.decode_fields(raw, expected_physical_offset=physical)
        except fmt.FormatError:
            raise _Unsure from None
        message = StoredMessage.from_record(raw, fields)
        if (message.topic, message.queue_id, message.queue_offset) != entry:
            raise _Unsure
        return message
