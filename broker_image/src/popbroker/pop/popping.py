"""Pop planning: request validation, queue visiting order, pop offsets and ``rest_num``.

Purpose: every decision of a ``ReceiveMessage`` (POP) request that needs no
I/O, as pure functions. Randomness is injected as integers so tests are
deterministic (fact sheet §1.3-§1.7).

A pop request, as numbered steps (the services layer drives them):

  1. Validate: :func:`validate_batch_size` (1..32), :func:`validate_invisible_ms`
     against :data:`RECEIVE_INVISIBLE_BOUNDS`, queue id via :func:`plan_visits`.
  2. Pick one ``pop_time_ms`` (= now) and one revive queue for the whole
     request, round-robin over a per-broker request counter
     (:func:`choose_revive_queue_id`; FIFO uses 999 and writes no CK).
  3. Draw ``random_percent`` in 0..99: :func:`retry_first` is true for
     ``random_percent < 20`` (1 in 5, RocketMQ's ``popFromRetryProbability``).
  4. :func:`plan_visits` orders the queues: the retry topic first when
     ``retry_first`` (never for FIFO), then the requested queue — or all
     queues, starting at ``(random_percent + i) % read_queue_num`` when the
     queue id is -1 — then the retry topic as filler when it was not first.
  5. Per queue: try the queue lock (contended → skip); compute the pop
     offset with :func:`pop_offset` under the lock; read at most the
     remaining batch (:func:`remaining_batch`); register the CK; unlock. Each
     visit adds its :func:`rest_contribution` to the response's ``rest_num``.

Pop offset decisions (fact sheet §1.5), :func:`pop_offset`:

  * The pop cursor — the checkpoint buffer's ``latest_begin_offset``, the end
    of the newest in-flight batch — when the buffer has one, so in-flight
    offsets are never handed out twice. It is never behind the committed
    offset while the process runs (commits only reach handed-off batches; an
    offset reset clears the cursor), so the caller need not read the
    committed offset then; given both, the larger wins.
  * Without a cursor (a new process, a cleared queue, FIFO): the committed
    offset; without one, the initial offset, which the caller commits at once
    (``PopStart.initialized``) so a restart does not move it.
  * Initial offset of a group that never committed on the queue
    (:func:`init_queue_offset`): retry topics and ``InitMode.MIN`` start at
    the queue's min offset. ``InitMode.MAX`` (what gRPC consumers use) starts
    at 0 when the queue is "young" — its min offset is still 0, i.e. the
    store still holds the queue's first message; our stand-in for
    RocketMQ's "offset 0 is still in the page cache" — and otherwise at
    ``max(min, max - 1)`` ("pop the last one").

Invisible time bounds (decided): a receive accepts 1 s .. 12 h (RocketMQ's
proxy has 10 s .. 12 h; we allow 1 s so short-deadline tests and consumers
work — short CKs bypass the buffer and are written at once). A change of
invisible time accepts 0 .. 12 h (0 = visible again as soon as revive runs).

In-flight guard (upstream #7772, fact sheet §1.4/§1.11; bounded per queue):
:class:`InflightCounter` holds, per queue, the messages handed out and not
acked yet, batch by batch (a batch = one checkpoint key) until the batch's
invisible deadline: +n per pop, -1 per ack (idempotent: a repeated ack or the
ack of a pre-restart pop changes nothing), a change of invisible time moves the
message into a new one-message batch, and a batch whose deadline passed stops
counting (revive hands its messages out again, from the retry topic). A
non-FIFO queue reads at most the room left under the threshold, and a queue
with no room (``room == 0``) is skipped (``VisitOutcome.OVER_THRESHOLD``: its
backlog goes to ``rest_num``; the pop returns fewer or no messages and
reports the skip), so
a consumer that never acks cannot pile up unbounded in-flight work and revive
traffic. FIFO queues are bounded by blocking instead. The counter is
memory-only: after a restart it starts empty, which only lets a queue be
popped sooner.

Callers: the popack services' ReceiveMessage handler.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from popbroker.pop import errors, receipts, retrytopics
from popbroker.pop.checkpoints import CheckpointKey, QueueKey

MAX_BATCH_SIZE = 32
POP_RETRY_PROBABILITY_PERCENT = 20
ALL_QUEUES = -1


@dataclass(frozen=True, slots=True)
class InvisibleTimeBounds:
    """Inclusive bounds of an invisible time, in milliseconds."""

    min_ms: int
    max_ms: int


RECEIVE_INVISIBLE_BOUNDS = InvisibleTimeBounds(
    min_ms=1_000, max_ms=receipts.MAX_HANDLE_INVISIBLE_MS
)
CHANGE_INVISIBLE_BOUNDS = InvisibleTimeBounds(min_ms=0, max_ms=receipts.MAX_HANDLE_INVISIBLE_MS)


class InitMode(enum.Enum):
    """Where a group without a committed offset starts (RocketMQ ``ConsumeInitMode``)."""

    MIN = 0
    MAX = 1


class VisitOutcome(enum.Enum):
    """How one queue visit of a pop ended, for ``rest_num`` accounting."""

    READ = "read"  # messages (or an empty scan) read up to next_begin
    LOCKED = "locked"  # queue lock contended: skipped
    BATCH_FULL = "batch_full"  # the batch was already full: the rest is not visited
    OVER_THRESHOLD = "over_threshold"  # too many in-flight messages: skipped
    REJECTED = "rejected"  # read, but the checkpoint buffer refused the CK: nothing returned
    FIFO_BLOCKED = "fifo_blocked"  # FIFO queue blocked: adds nothing (#8592)


@dataclass(frozen=True, slots=True)
class QueueVisit:
    """One queue to visit, in order."""

    topic: str
    queue_id: int
    is_retry: bool


@dataclass(frozen=True, slots=True)
class PopStart:
    """Where a pop of one queue starts."""

    queue_offset: int
    initialized: bool  # no cursor and no committed offset: commit ``queue_offset`` now


def validate_batch_size(max_messages: int) -> int:
    """Return ``max_messages`` if within 1..32, else raise :class:`IllegalBatchSize`."""
    if not 1 <= max_messages <= MAX_BATCH_SIZE:
        raise errors.IllegalBatchSize(f"batch size {max_messages} outside 1..{MAX_BATCH_SIZE}")
    return max_messages


def validate_invisible_ms(
    invisible_ms: int, bounds: InvisibleTimeBounds = RECEIVE_INVISIBLE_BOUNDS
) -> int:
    """Return ``invisible_ms`` if within ``bounds``, else raise :class:`IllegalInvisibleTime`."""
    if not bounds.min_ms <= invisible_ms <= bounds.max_ms:
        raise errors.IllegalInvisibleTime(
            f"invisible time {invisible_ms} ms outside {bounds.min_ms}..{bounds.max_ms} ms"
        )
    return invisible_ms


def choose_revive_queue_id(request_seq: int, *, revive_queue_num: int, fifo: bool) -> int:
    """Revive queue of the request number ``request_seq``: round-robin, 999 for FIFO."""
    if fifo:
        return receipts.FIFO_REVIVE_QUEUE_ID
    if revive_queue_num <= 0:
        raise errors.IllegalQueueId("revive_queue_num must be positive")
    return request_seq % revive_queue_num


def retry_first(
    random_percent: int, *, probability_percent: int = POP_RETRY_PROBABILITY_PERCENT
) -> bool:
    """True when this request reads the retry topic first (``random_percent`` in 0..99)."""
    return random_percent % 100 < probability_percent


def plan_visits(
    *,
    topic: str,
    group: str,
    queue_id: int,
    read_queue_num: int,
    random_percent: int,
    fifo: bool,
    retry_queue_num: int = 1,
) -> tuple[QueueVisit, ...]:
    """The queues one pop request visits, in order (step 4 of the module docstring).

    Any negative ``queue_id`` means all queues; a queue id ``>= read_queue_num``
    raises :class:`IllegalQueueId`.
    """
    if queue_id >= read_queue_num:
        raise errors.IllegalQueueId(f"queue {queue_id} >= read queue number {read_queue_num}")
    if queue_id < 0:
        normal = tuple(
            QueueVisit(topic, (random_percent + i) % read_queue_num, is_retry=False)
            for i in range(read_queue_num)
        )
    else:
        normal = (QueueVisit(topic, queue_id, is_retry=False),)
    if fifo:
        return normal
    retry_name = retrytopics.retry_topic(group, topic)
    retry = tuple(QueueVisit(retry_name, i, is_retry=True) for i in range(retry_queue_num))
    if retry_first(random_percent):
        return retry + normal
    return normal + retry


def init_queue_offset(
    *, topic: str, init_mode: InitMode, min_queue_offset: int, max_queue_offset: int
) -> int:
    """Start offset for a group with no committed offset on the queue (see module docstring)."""
    if init_mode is InitMode.MIN or retrytopics.is_retry_topic(topic):
        return min_queue_offset
    if min_queue_offset <= 0:
        return 0
    return max(min_queue_offset, max_queue_offset - 1)


def pop_offset(
    *,
    pop_cursor: int | None,
    committed_queue_offset: int | None = None,
    init_queue_offset: int | None = None,
) -> PopStart:
    """Where to pop the queue (see "Pop offset decisions" in the module docstring).

    ``committed_queue_offset`` is None when there is none or when the caller,
    holding a cursor, did not read it; ``init_queue_offset`` is needed only
    when neither a cursor nor a committed offset exists (else ValueError).
    """
    if pop_cursor is not None:
        if committed_queue_offset is not None and committed_queue_offset > pop_cursor:
            return PopStart(committed_queue_offset, initialized=False)
        return PopStart(pop_cursor, initialized=False)
    if committed_queue_offset is not None:
        return PopStart(committed_queue_offset, initialized=False)
    if init_queue_offset is None:
        raise ValueError("no pop cursor, committed offset or initial offset")
    return PopStart(init_queue_offset, initialized=True)


def remaining_batch(max_messages: int, already_read: int) -> int:
    """How many more messages this request may read (0 = batch full)."""
    return max(0, max_messages - already_read)


def rest_contribution(
    outcome: VisitOutcome,
    *,
    max_queue_offset: int = 0,
    pop_queue_offset: int = 0,
    next_begin_queue_offset: int | None = None,
) -> int:
    """Backlog one visit adds to ``rest_num`` (fact sheet §1.7).

    A read adds ``max - next_begin``; a queue skipped for the in-flight guard
    or read in vain (the CK refused) ``max - pop offset``; a contended lock or
    a full batch, whose offsets were not read, 1 — enough to wake another
    poller; a blocked FIFO queue nothing, so its arrivals cause no useless
    wake-ups.
    """
    if outcome is VisitOutcome.FIFO_BLOCKED:
        return 0
    if outcome in (VisitOutcome.LOCKED, VisitOutcome.BATCH_FULL):
        return 1
    if outcome is VisitOutcome.READ:
        end = pop_queue_offset if next_begin_queue_offset is None else next_begin_queue_offset
        return max(0, max_queue_offset - end)
    return max(0, max_queue_offset - pop_queue_offset)


class InflightCounter:
    """Handed-out, un-acked messages per queue, until their deadline (see the module docstring)."""

    def __init__(self) -> None:
        # queue -> batch -> (invisible deadline, offsets not acked yet)
        self._batches: dict[QueueKey, dict[CheckpointKey, tuple[int, set[int]]]] = {}

    def on_pop(self, batch: CheckpointKey, queue_offsets: Sequence[int], *, until_ms: int) -> None:
        """The messages at ``queue_offsets`` were handed out in ``batch``, invisible until then."""
        if not queue_offsets:
            return
        queue = _queue_of(batch)
        _, pending = self._batches.setdefault(queue, {}).setdefault(batch, (until_ms, set()))
        pending.update(queue_offsets)

    def on_ack(self, batch: CheckpointKey, queue_offset: int) -> None:
        """The message at ``queue_offset`` of ``batch`` was acked (or moved to a new batch)."""
        queue = _queue_of(batch)
        batches = self._batches.get(queue)
        entry = batches.get(batch) if batches is not None else None
        if batches is None or entry is None:
            return  # popped before a restart, expired, or already fully acked
        entry[1].discard(queue_offset)
        if not entry[1]:
            del batches[batch]
            if not batches:
                del self._batches[queue]

    def clear(self, queue_key: QueueKey) -> None:
        """Forget the queue (offset reset)."""
        self._batches.pop(queue_key, None)

    def inflight(self, queue_key: QueueKey, now_ms: int) -> int:
        """Messages of the queue handed out, un-acked and still invisible at ``now_ms``."""
        batches = self._batches.get(queue_key)
        if batches is None:
            return 0
        for expired in [k for k, (until_ms, _) in batches.items() if until_ms <= now_ms]:
            del batches[expired]
        if not batches:
            del self._batches[queue_key]
            return 0
        return sum(len(pending) for _, pending in batches.values())

    def room(self, queue_key: QueueKey, threshold: int, now_ms: int) -> int | None:
        """How many more messages the queue may hand out; None when unbounded (threshold <= 0)."""
        if threshold <= 0:
            return None
        return max(0, threshold - self.inflight(queue_key, now_ms))


def _queue_of(batch: CheckpointKey) -> QueueKey:
    return QueueKey(batch.topic, batch.group, batch.queue_id)
