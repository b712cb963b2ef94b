"""Revive planning: match acks to checkpoints per revive queue and plan redeliveries.

Purpose: the revive role tails each revive queue and turns checkpoints (CKs)
whose invisible time expired into re-puts of their un-acked messages. One
:class:`ReviveLedger` per revive queue holds the unresolved CKs seen so far.

Our revive model (no timer wheel, decided in DESIGN §3.2): CK and ACK records
are appended to revive queue *q* in append order, and an ACK always comes
after its CK — a CK is durable before anyone can ack it outside memory (the
checkpoint buffer returns ``NOT_BUFFERED`` only for CKs that are durable, and
acks merged while a CK was being written are appended after it).

Algorithm, as numbered steps (the services layer drives them):

  1. Scan the revive queue from ``safe_revive_offset()`` (persisted) in order;
     feed every record to ``observe_ck`` / ``observe_ack`` with its revive
     queue offset, and every malformed or unknown record to ``observe_other``.
     Positions must increase (:class:`PopOrderViolation` otherwise).
  2. ``observe_ack`` matches by the tuple key (a record without ``bn`` uses
     the local broker name, upstream #8460) and sets bits. Orphan acks (no
     pending CK: already revived, never written, bogus), duplicate acks and
     offsets outside the CK are **counted and ignored** — they never stall
     anything. A CK whose messages are all acked resolves silently.
  3. ``due(now_ms)`` returns a :class:`ReviveTask` for every pending CK with
     ``revive_time + ack_grace_ms <= now_ms``, carrying its un-acked offsets.
     ``now_ms`` must be a time at which the scan had already reached the end
     of the revive queue, so every ack appended before the deadline (plus the
     grace for acks still travelling through popack) has been observed —
     never revive before due (upstream #3507/#5).
  4. For each offset of a task the services read the message, check it with
     :func:`verify_revive_read` (upstream #7724/#8479: the message must have
     the CK's queue offset; offsets beyond the queue's max are skipped, not
     retried forever), decide :func:`~popbroker.pop.retrytopics.retry_or_dlq`,
     and put the copy.
  5. ``complete(task)`` resolves the CK. ``fail(task, now_ms,
     succeeded_queue_offsets=...)`` keeps it pending **with the original CK's
     remaining un-acked offsets** (upstream #25 re-put a CK whose start offset
     was a timestamp) and makes it due again after the rePutCK back-off
     10, 20, 30, 60, … 7200 s (capped; retried forever — no loss by design).
     Offsets already re-put are never re-put by a later attempt (#7724).
  6. ``safe_revive_offset()`` is the revive progress to persist: the position
     of the oldest unresolved CK, or the scanned end when none is pending.
     Everything strictly before it is resolved, so long runs of ACK records
     never stall it (upstream #3443/#5408). After a restart the scan restarts
     there; acks of CKs resolved before the crash become harmless orphans,
     CKs revived but not yet passed are revived again (duplicates, never loss).

Bounds: at most ``max_pending_cks`` pending CKs; ``observe_ck`` raises the
retriable :class:`CapacityExceeded` beyond it (state unchanged) — the scanner
pauses until CKs resolve (check ``has_capacity`` before reading on).

Callers: the revive services (one ledger per revive queue).
"""

from __future__ import annotations

import enum
import heapq
from dataclasses import dataclass

from popbroker.pop import checkpoints, errors, records
from popbroker.pop.checkpoints import Checkpoint, CheckpointKey

# rePutCK intervals in seconds (fact sheet §3.8), indexed by attempt, capped at the last.
REPUT_BACKOFF_S: tuple[int, ...] = (10, 20, 30, 60, 120, 180, 240, 300, 360, 420, 480)
REPUT_BACKOFF_S += (540, 600, 1200, 1800, 3600, 7200)


def reput_backoff_ms(attempt: int) -> int:
    """Delay before retry number ``attempt + 1`` of a failed revive (rePutCK intervals)."""
    return REPUT_BACKOFF_S[min(max(attempt, 0), len(REPUT_BACKOFF_S) - 1)] * 1000


@dataclass(frozen=True, slots=True)
class ReviveSettings:
    """Knobs of a revive ledger."""

    ack_grace_ms: int = 300
    max_pending_cks: int = 200_000


@dataclass(frozen=True, slots=True)
class ReviveTask:
    """Re-put ``queue_offsets`` of ``checkpoint`` (attempt ``attempt``, 0 = first)."""

    checkpoint: Checkpoint
    queue_offsets: tuple[int, ...]
    revive_queue_offset: int
    attempt: int

    @property
    def key(self) -> CheckpointKey:
        """The checkpoint's match key."""
        return self.checkpoint.key


@dataclass(frozen=True, slots=True)
class LedgerStats:
    """Counters for metrics and tests."""

    pending: int
    in_flight: int
    resolved: int
    orphan_acks: int
    duplicate_acks: int
    bogus_ack_offsets: int
    duplicate_cks: int
    other_records: int


class _Pending:
    __slots__ = ("attempt", "ck", "done_bitmap", "due_ms", "in_flight", "revive_queue_offset")

    def __init__(self, ck: Checkpoint, revive_queue_offset: int, due_ms: int) -> None:
        self.ck = ck
        self.revive_queue_offset = revive_queue_offset
        self.due_ms = due_ms
        self.in_flight = False
        self.attempt = 0
        self.done_bitmap = 0  # indexes already re-put by an earlier, partly failed attempt


class ReviveLedger:
    """Unresolved checkpoints of one revive queue (see the module docstring)."""

    def __init__(
        self,
        *,
        revive_queue_id: int,
        local_broker_name: str,
        start_revive_queue_offset: int,
        settings: ReviveSettings | None = None,
    ) -> None:
        self.revive_queue_id = revive_queue_id
        self._broker_name = local_broker_name
        self._settings = settings or ReviveSettings()
        self._scanned_end = start_revive_queue_offset
        # Pending CKs by revive position; insertion order = position order (observed in order).
        self._pending: dict[int, _Pending] = {}
        # Match key -> positions. Usually one; two distinct CKs may share a key (a change of
        # invisible time and a post-crash re-pop in the same millisecond): acks apply to both.
        self._by_key: dict[CheckpointKey, list[int]] = {}
        self._heap: list[tuple[int, int]] = []  # (due_ms, position), lazily invalidated
        self._in_flight = 0
        self._resolved = 0
        self._orphan_acks = 0
        self._duplicate_acks = 0
        self._bogus_ack_offsets = 0
        self._duplicate_cks = 0
        self._other_records = 0

    # -- scanning ---------------------------------------------------------------------------

    @property
    def scanned_end(self) -> int:
        """The next revive queue offset to scan."""
        return self._scanned_end

    @property
    def has_capacity(self) -> bool:
        """False when ``observe_ck`` would refuse a new CK; pause scanning until then."""
        return len(self._pending) < self._settings.max_pending_cks

    def observe_ck(self, ck: Checkpoint, revive_queue_offset: int) -> None:
        """A ``ck`` record at ``revive_queue_offset``."""
        twin = self._twin_of(ck)
        if twin is None and not self.has_capacity:
            raise errors.CapacityExceeded("revive ledger is full; pause the scan")
        self._advance(revive_queue_offset)
        if twin is not None:  # the same CK written twice (an unknown-outcome retry): merge
            self._duplicate_cks += 1
            twin.ck = checkpoints.with_bitmap(twin.ck, ck.ack_bitmap)
            self._resolve_if_done(twin)
            return
        if checkpoints.all_acked(ck):
            self._resolved += 1
            return
        due_ms = ck.revive_time_ms + self._settings.ack_grace_ms
        self._pending[revive_queue_offset] = _Pending(ck, revive_queue_offset, due_ms)
        self._by_key.setdefault(ck.key, []).append(revive_queue_offset)
        heapq.heappush(self._heap, (due_ms, revive_queue_offset))

    def _twin_of(self, ck: Checkpoint) -> _Pending | None:
        for position in self._by_key.get(ck.key, ()):
            pending = self._pending[position]
            if pending.ck.queue_offset_diffs == ck.queue_offset_diffs:
                return pending
        return None

    def observe_ack(self, ack: records.AckRecord, revive_queue_offset: int) -> None:
        """An ``ack``/``bAck`` record at ``revive_queue_offset``."""
        self._advance(revive_queue_offset)
        key = records.ack_key(ack, local_broker_name=self._broker_name)
        positions = self._by_key.get(key)
        if positions is None:
            self._orphan_acks += 1
            return
        matched_offsets: set[int] = set()
        for position in tuple(positions):
            pending = self._pending[position]
            bitmap, _ = checkpoints.bitmap_for(pending.ck, ack.ack_queue_offsets)
            matched_offsets.update(
                queue_offset
                for queue_offset in ack.ack_queue_offsets
                if checkpoints.index_of(pending.ck, queue_offset) is not None
            )
            if bitmap & pending.ck.ack_bitmap:
                self._duplicate_acks += 1
            pending.ck = checkpoints.with_bitmap(pending.ck, bitmap)
            self._resolve_if_done(pending)
        self._bogus_ack_offsets += len(set(ack.ack_queue_offsets) - matched_offsets)

    def observe_other(self, revive_queue_offset: int) -> None:
        """A malformed or unknown record: skip it, counted."""
        self._advance(revive_queue_offset)
        self._other_records += 1

    def _advance(self, revive_queue_offset: int) -> None:
        if revive_queue_offset < self._scanned_end:
            raise errors.PopOrderViolation(
                f"revive record at {revive_queue_offset} behind the scanned end {self._scanned_end}"
            )
        self._scanned_end = revive_queue_offset + 1

    # -- planning ---------------------------------------------------------------------------

    def due(self, now_ms: int, *, limit: int | None = None) -> list[ReviveTask]:
        """Tasks for pending CKs due at ``now_ms`` (see step 3), earliest deadline first."""
        tasks: list[ReviveTask] = []
        while self._heap and (limit is None or len(tasks) < limit):
            due_ms, position = self._heap[0]
            pending = self._pending.get(position)
            if pending is None or pending.in_flight or pending.due_ms != due_ms:
                heapq.heappop(self._heap)  # stale entry
                continue
            if due_ms > now_ms:
                break
            heapq.heappop(self._heap)
            offsets = _remaining_offsets(pending)
            if not offsets:
                self._resolve(pending)
                continue
            pending.in_flight = True
            self._in_flight += 1
            tasks.append(
                ReviveTask(
                    checkpoint=pending.ck,
                    queue_offsets=offsets,
                    revive_queue_offset=position,
                    attempt=pending.attempt,
                )
            )
        return tasks

    def complete(self, task: ReviveTask) -> None:
        """Every offset of ``task`` was re-put (or skipped as verified gone): resolve the CK."""
        pending = self._current(task)
        if pending is not None:
            self._in_flight -= 1
            pending.in_flight = False
            self._resolve(pending)

    def fail(
        self, task: ReviveTask, now_ms: int, *, succeeded_queue_offsets: tuple[int, ...] = ()
    ) -> None:
        """Some offsets of ``task`` could not be re-put: retry the rest after a back-off."""
        pending = self._current(task)
        if pending is None:
            return
        self._in_flight -= 1
        pending.in_flight = False
        done, _ = checkpoints.bitmap_for(pending.ck, succeeded_queue_offsets)
        pending.done_bitmap |= done
        if not _remaining_offsets(pending):
            self._resolve(pending)
            return
        pending.due_ms = now_ms + reput_backoff_ms(pending.attempt)
        pending.attempt += 1
        heapq.heappush(self._heap, (pending.due_ms, pending.revive_queue_offset))

    def put_back(self, task: ReviveTask) -> None:
        """``task`` was not tried (this replica does not lead its set now): due again as it
        was, with no back-off and no attempt counted."""
        pending = self._current(task)
        if pending is None:
            return
        self._in_flight -= 1
        pending.in_flight = False
        heapq.heappush(self._heap, (pending.due_ms, pending.revive_queue_offset))

    def _current(self, task: ReviveTask) -> _Pending | None:
        pending = self._pending.get(task.revive_queue_offset)
        if pending is None or not pending.in_flight or pending.attempt != task.attempt:
            return None  # a stale task (ledger rebuilt, or completed twice)
        return pending

    # -- progress ---------------------------------------------------------------------------

    def safe_revive_offset(self) -> int:
        """Revive progress to persist: the oldest unresolved CK's position, else the scanned end."""
        return next(iter(self._pending), self._scanned_end)

    def stats(self) -> LedgerStats:
        """Current counters."""
        return LedgerStats(
            pending=len(self._pending),
            in_flight=self._in_flight,
            resolved=self._resolved,
            orphan_acks=self._orphan_acks,
            duplicate_acks=self._duplicate_acks,
            bogus_ack_offsets=self._bogus_ack_offsets,
            duplicate_cks=self._duplicate_cks,
            other_records=self._other_records,
        )

    def _resolve_if_done(self, pending: _Pending) -> None:
        if not pending.in_flight and not _remaining_offsets(pending):
            self._resolve(pending)

    def _resolve(self, pending: _Pending) -> None:
        position = pending.revive_queue_offset
        del self._pending[position]
        positions = self._by_key[pending.ck.key]
        positions.remove(position)
        if not positions:
            del self._by_key[pending.ck.key]
        self._resolved += 1


def _remaining_offsets(pending: _Pending) -> tuple[int, ...]:
    ck = pending.ck
    skip = ck.ack_bitmap | pending.done_bitmap
    return tuple(
        ck.start_queue_offset + diff
        for index, diff in enumerate(ck.queue_offset_diffs)
        if not skip >> index & 1
    )


class ReadVerdict(enum.Enum):
    """What revive does with one message read back for a CK offset."""

    REPUT = "reput"  # it is the message the CK names: copy it to retry/DLQ
    SKIP_REMOVED = "skip_removed"  # below the queue's min: retention removed it
    SKIP_BEYOND_MAX = "skip_beyond_max"  # at/after the queue's max: topic recreated (#8479)
    SKIP_MISMATCH = "skip_mismatch"  # the store returned another offset: never re-put it (#7724)
    SKIP_TOPIC_GONE = "skip_topic_gone"  # topic or group deleted
    RETRY_LATER = "retry_later"  # nothing read although it should exist: transient


def verify_revive_read(
    *,
    expected_queue_offset: int,
    min_queue_offset: int,
    max_queue_offset: int,
    read_queue_offset: int | None,
    topic_exists: bool = True,
) -> ReadVerdict:
    """Judge one revive read of ``expected_queue_offset`` (upstream #6/#8).

    ``read_queue_offset`` is the queue offset of the message the store returned,
    or None when it returned none. Only ``REPUT`` puts a copy; ``RETRY_LATER``
    counts as a failed offset for :meth:`ReviveLedger.fail`; every ``SKIP_*``
    counts as done (and should be logged/metered), so a CK never loops forever.
    """
    if not topic_exists:
        return ReadVerdict.SKIP_TOPIC_GONE
    if expected_queue_offset >= max_queue_offset:
        return ReadVerdict.SKIP_BEYOND_MAX
    if expected_queue_offset < min_queue_offset:
        return ReadVerdict.SKIP_REMOVED
    if read_queue_offset is None:
        return ReadVerdict.RETRY_LATER
    if read_queue_offset != expected_queue_offset:
        return ReadVerdict.SKIP_MISMATCH
    return ReadVerdict.REPUT
