"""The checkpoint buffer: in-memory CKs, ack merge, pop cursors and commit order.

Purpose: the popack role's memory between a pop and the revive log
(fact sheet §2.5, "mode B"). It holds each new checkpoint (CK) for a bounded
time so that fast acks merge into its bitmap instead of becoming revive
records; a CK whose messages are all acked in memory is dropped and **never
written**. It also keeps, per queue, the commit deque that decides how far the
committed consumer offset may advance, and the pop cursor.

Entry life cycle (one CK)::

    add ──BUFFERED──▶ IN_MEMORY ──due_for_flush──▶ WRITING ──mark_durable──▶ (gone, handed off)
     │                    │  ▲                        │
     │                    │  └──────flush_failed──────┘
     │                    └──all acked in memory──▶ (gone, handed off, never written)
     └──WRITE_NOW──▶ WRITING                   (caller appends the CK immediately)

Rules, as numbered steps:

  1. ``add`` refuses to buffer (``WRITE_NOW``: the caller appends the CK now)
     when buffering is disabled or draining, when the CK would be due for
     flush almost at once (``revive_time - now < ck_flush_ahead_ms +
     admission_margin_ms``, i.e. a short invisible time), or when
     ``max_buffered_cks`` CKs are already in memory. It refuses the pop
     altogether (``REJECTED``: do not return the messages) when
     ``max_tracked_cks`` CKs are in memory or being written, or when the
     queue's commit deque holds ``max_commit_queue_len`` batches — these hard
     bounds keep memory bounded while the store refuses writes (upstream
     #7031/#10256).
  2. ``due_for_flush`` hands out, oldest deadline first, every in-memory CK
     with ``now >= revive_time - ck_flush_ahead_ms`` (3 s) or ``now >=
     pop_time + ck_stay_ms`` (10 s), plus the oldest ones while more than
     ``max_buffered_cks`` are in memory. The CK handed out carries **the
     bitmap known at that moment**; the entry becomes WRITING.
  3. ``ack`` on an IN_MEMORY or WRITING CK sets the bit (``MERGED``). A fully
     acked IN_MEMORY CK is dropped and its batch is handed off. Bits merged
     while WRITING are not in the record being written: ``mark_durable``
     returns them as one ack record to append *after* the CK, so an ACK never
     precedes its CK in the revive log. An ack for a CK that is not here
     (durable, or unknown) is ``NOT_BUFFERED``: the caller appends an ACK
     record — the CK is already in the log before it. ``BAD_INDEX`` (offset
     not in the buffered CK with that key) is treated like ``NOT_BUFFERED``.
  4. A batch is *handed off* when its CK is durable in the revive log or fully
     acked; the empty-pop "just offset" entry is handed off from birth.
     ``advance_commits`` pops the longest handed-off prefix of every queue's
     deque, strictly in pop order, and returns the new committed queue offset
     (``next_begin_queue_offset`` of the last popped entry) — never beyond a
     batch that is not handed off. This is the at-least-once invariant.
  5. The pop cursor (``latest_begin_offset``) is the highest
     ``next_begin_queue_offset`` ever added for the queue; it survives
     ``advance_commits`` (the store commit may land later) and is only reset
     by ``clear_queue``. A pop starts at ``max(committed, cursor)``, and
     ``add`` raises :class:`PopOrderViolation` for a CK starting behind the
     cursor, so a running broker never hands out an in-flight offset twice.

Concurrency: none here. The services layer holds one lock around every call
(each is O(log n) or O(entries returned)) and does the I/O outside it.

Callers: the popack services (pop, ack, change-invisible, the flush loop and
the offset-commit loop). Only *pop* CKs are added here: a change-invisible CK
starts behind the cursor and belongs to no pop's commit order, so it is
appended to the revive log directly (:mod:`popbroker.pop.invisibility`).
"""

from __future__ import annotations

import enum
import heapq
from collections import deque
from dataclasses import dataclass

from popbroker.pop import checkpoints, errors, records
from popbroker.pop.checkpoints import Checkpoint, CheckpointKey, QueueKey


class Admission(enum.Enum):
    """What ``add`` decided for a new checkpoint."""

    BUFFERED = "buffered"  # held in memory; due_for_flush hands it out later
    WRITE_NOW = "write_now"  # append the CK now, then mark_durable (or flush_failed)
    REJECTED = "rejected"  # do not return the messages; nothing is tracked


class AckOutcome(enum.Enum):
    """What ``ack`` did with one acked queue offset."""

    MERGED = "merged"  # bit set in memory; nothing to write now
    NOT_BUFFERED = "not_buffered"  # no CK here: append an ACK record
    ALREADY_ACKED = "already_acked"  # idempotent repeat; nothing to do
    # The offset is not in the buffered CK with that key. A different CK may share the key
    # (a pre-crash handle, same millisecond): append an ACK record anyway; it is harmless.
    BAD_INDEX = "bad_index"


@dataclass(frozen=True, slots=True)
class BufferSettings:
    """Bounds of the checkpoint buffer (RocketMQ's ``popCk*`` knobs)."""

    enabled: bool = True
    ck_stay_ms: int = 10_000
    ck_flush_ahead_ms: int = 3_000
    admission_margin_ms: int = 1_500
    max_buffered_cks: int = 20_000
    max_tracked_cks: int = 50_000
    max_commit_queue_len: int = 20_000


@dataclass(frozen=True, slots=True)
class BufferStats:
    """Sizes, for metrics and tests."""

    in_memory: int
    writing: int
    commit_entries: int


class _CommitEntry:
    __slots__ = ("handed_off", "next_begin_queue_offset", "queue_key")

    def __init__(self, queue_key: QueueKey, next_begin_queue_offset: int, *, handed_off: bool):
        self.queue_key = queue_key
        self.next_begin_queue_offset = next_begin_queue_offset
        self.handed_off = handed_off


class _Entry:
    __slots__ = ("ck", "commit", "due_ms", "written_bitmap")

    def __init__(self, ck: Checkpoint, commit: _CommitEntry, due_ms: int) -> None:
        self.ck = ck
        self.commit = commit
        self.due_ms = due_ms
        self.written_bitmap = 0


class CheckpointBuffer:
    """In-memory checkpoints, ack merge, pop cursors and commit deques (see module docstring)."""

    def __init__(self, settings: BufferSettings | None = None) -> None:
        self._settings = settings or BufferSettings()
        self._in_memory: dict[CheckpointKey, _Entry] = {}  # insertion order = pop order
        self._writing: dict[CheckpointKey, _Entry] = {}
        self._due_heap: list[tuple[int, int, CheckpointKey]] = []
        self._heap_seq = 0
        self._commit_queues: dict[QueueKey, deque[_CommitEntry]] = {}
        self._cursors: dict[QueueKey, int] = {}
        self._dirty: set[QueueKey] = set()
        self._draining = False

    # -- pop side ---------------------------------------------------------------------------

    def add(self, ck: Checkpoint, *, next_begin_queue_offset: int, now_ms: int) -> Admission:
        """Track the checkpoint of a pop that read up to ``next_begin_queue_offset`` (exclusive)."""
        queue_key = ck.queue_key
        self._check_not_behind_cursor(queue_key, ck.start_queue_offset)
        if next_begin_queue_offset <= ck.last_queue_offset:
            raise errors.PopOrderViolation("next_begin_queue_offset must lie past the batch")
        key = ck.key
        settings = self._settings
        commit_queue = self._commit_queues.get(queue_key)
        if (
            key in self._in_memory
            or key in self._writing
            or len(self._in_memory) + len(self._writing) >= settings.max_tracked_cks
            or (commit_queue is not None and len(commit_queue) >= settings.max_commit_queue_len)
        ):
            return Admission.REJECTED
        commit = _CommitEntry(queue_key, next_begin_queue_offset, handed_off=False)
        self._commit_queues.setdefault(queue_key, deque()).append(commit)
        self._cursors[queue_key] = next_begin_queue_offset
        due_ms = min(
            ck.revive_time_ms - settings.ck_flush_ahead_ms, ck.pop_time_ms + settings.ck_stay_ms
        )
        entry = _Entry(ck, commit, due_ms)
        if (
            not settings.enabled
            or self._draining
            or ck.revive_time_ms - now_ms
            < settings.ck_flush_ahead_ms + settings.admission_margin_ms
            or len(self._in_memory) >= settings.max_buffered_cks
        ):
            entry.written_bitmap = ck.ack_bitmap
            self._writing[key] = entry
            return Admission.WRITE_NOW
        self._in_memory[key] = entry
        self._push_due(due_ms, key)
        return Admission.BUFFERED

    def add_just_offset(
        self, queue_key: QueueKey, *, queue_offset: int, next_begin_queue_offset: int
    ) -> bool:
        """Record an empty pop that scanned ``[queue_offset, next_begin_queue_offset)``.

        The "ck mock" of upstream: nothing is written, but the committed offset
        advances past the filtered-out range in order with the surrounding
        batches, and the pop cursor skips it. Returns False (nothing recorded)
        when the queue's commit deque is full.
        """
        self._check_not_behind_cursor(queue_key, queue_offset)
        if next_begin_queue_offset < queue_offset:
            raise errors.PopOrderViolation("next_begin_queue_offset lies before queue_offset")
        commit_queue = self._commit_queues.setdefault(queue_key, deque())
        if len(commit_queue) >= self._settings.max_commit_queue_len:
            return False
        commit_queue.append(_CommitEntry(queue_key, next_begin_queue_offset, handed_off=True))
        self._cursors[queue_key] = next_begin_queue_offset
        self._dirty.add(queue_key)
        return True

    def latest_begin_offset(self, queue_key: QueueKey) -> int | None:
        """The pop cursor: where the next pop of the queue must start at the earliest."""
        return self._cursors.get(queue_key)

    def clear_queue(self, queue_key: QueueKey) -> None:
        """Forget the queue's cursor and commit deque (server-side offset reset).

        Buffered CKs of the queue stay: they are still flushed and revived, so
        messages in flight at the reset are not lost.
        """
        self._commit_queues.pop(queue_key, None)
        self._cursors.pop(queue_key, None)
        self._dirty.discard(queue_key)

    def _check_not_behind_cursor(self, queue_key: QueueKey, queue_offset: int) -> None:
        cursor = self._cursors.get(queue_key)
        if cursor is not None and queue_offset < cursor:
            raise errors.PopOrderViolation(
                f"pop at queue offset {queue_offset} behind the cursor {cursor} of {queue_key}"
            )

    # -- ack side ---------------------------------------------------------------------------

    def ack(self, key: CheckpointKey, queue_offset: int) -> AckOutcome:
        """Merge an ack of ``queue_offset`` into the buffered CK with ``key``, if any."""
        entry = self._in_memory.get(key)
        writing = entry is None
        if entry is None:
            entry = self._writing.get(key)
            if entry is None:
                return AckOutcome.NOT_BUFFERED
        index = checkpoints.index_of(entry.ck, queue_offset)
        if index is None:
            return AckOutcome.BAD_INDEX
        if checkpoints.is_acked(entry.ck, index):
            return AckOutcome.ALREADY_ACKED
        entry.ck = checkpoints.with_bitmap(entry.ck, 1 << index)
        if not writing and checkpoints.all_acked(entry.ck):
            del self._in_memory[key]  # never written: nothing left to redeliver
            self._hand_off(entry.commit)
        return AckOutcome.MERGED

    # -- flush side -------------------------------------------------------------------------

    def due_for_flush(self, now_ms: int, *, limit: int | None = None) -> list[Checkpoint]:
        """Checkpoints to append to the revive log now, oldest first; they become WRITING."""
        settings = self._settings
        due: list[Checkpoint] = []
        while self._due_heap and (limit is None or len(due) < limit):
            due_ms, _, key = self._due_heap[0]
            entry = self._in_memory.get(key)
            if entry is None or entry.due_ms != due_ms:
                heapq.heappop(self._due_heap)  # stale: acked away, flushed or re-queued
                continue
            if due_ms > now_ms and not self._draining:
                break
            heapq.heappop(self._due_heap)
            due.append(self._start_writing(key))
        while len(self._in_memory) > settings.max_buffered_cks or (
            self._draining and self._in_memory
        ):
            if limit is not None and len(due) >= limit:
                break
            oldest = next(iter(self._in_memory))
            due.append(self._start_writing(oldest))
        return due

    def _start_writing(self, key: CheckpointKey) -> Checkpoint:
        entry = self._in_memory.pop(key)
        entry.written_bitmap = entry.ck.ack_bitmap
        self._writing[key] = entry
        return entry.ck

    def mark_durable(self, key: CheckpointKey) -> records.AckRecord | None:
        """The CK with ``key`` is durable in the revive log; its batch is handed off.

        Returns the acks merged while it was being written (not in the written
        record), as one ack record the caller must append after the CK, to the
        CK's revive queue; None when there are none or the key is unknown.
        """
        entry = self._writing.pop(key, None)
        if entry is None:
            return None
        self._hand_off(entry.commit)
        late_bits = entry.ck.ack_bitmap & ~entry.written_bitmap
        if not late_bits:
            return None
        late_offsets = tuple(
            checkpoints.queue_offset_at(entry.ck, index)
            for index in range(entry.ck.count)
            if late_bits >> index & 1
        )
        return records.ack_for(key, late_offsets)

    def flush_failed(self, key: CheckpointKey, now_ms: int) -> None:
        """Appending the CK with ``key`` failed: keep it in memory, due again at once."""
        entry = self._writing.pop(key, None)
        if entry is None:
            return
        if checkpoints.all_acked(entry.ck):
            self._hand_off(entry.commit)  # everything got acked meanwhile: no write needed
            return
        entry.due_ms = now_ms
        self._in_memory[key] = entry
        self._push_due(now_ms, key)

    def begin_drain(self) -> None:
        """Graceful stop: buffer nothing new; every in-memory CK is due now."""
        self._draining = True

    # -- commit side ------------------------------------------------------------------------

    def advance_commits(self) -> dict[QueueKey, int]:
        """New committed queue offsets: the end of each queue's longest handed-off prefix."""
        advanced: dict[QueueKey, int] = {}
        for queue_key in self._dirty:
            commit_queue = self._commit_queues.get(queue_key)
            if commit_queue is None:
                continue
            while commit_queue and commit_queue[0].handed_off:
                advanced[queue_key] = commit_queue.popleft().next_begin_queue_offset
        self._dirty.clear()
        return advanced

    def _hand_off(self, commit: _CommitEntry) -> None:
        commit.handed_off = True
        self._dirty.add(commit.queue_key)

    def _push_due(self, due_ms: int, key: CheckpointKey) -> None:
        self._heap_seq += 1
        heapq.heappush(self._due_heap, (due_ms, self._heap_seq, key))

    # -- introspection ----------------------------------------------------------------------

    def stats(self) -> BufferStats:
        """Current sizes."""
        return BufferStats(
            in_memory=len(self._in_memory),
            writing=len(self._writing),
            commit_entries=sum(len(q) for q in self._commit_queues.values()),
        )

    def buffered(self, key: CheckpointKey) -> Checkpoint | None:
        """The in-memory (or being written) CK with ``key``, with its current bitmap."""
        entry = self._in_memory.get(key) or self._writing.get(key)
        return None if entry is None else entry.ck
