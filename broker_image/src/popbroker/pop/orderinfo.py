"""FIFO order info: the last batch of one ordered queue, its acks and its block rule.

Purpose: ordered (FIFO) POP writes no checkpoint, uses no revive and no retry
topic (fact sheet §6). Instead, per (topic, group, queue) the broker keeps an
:class:`OrderInfo` describing the last batch handed out, blocks the queue
while any message of that batch is invisible and un-acked, and redelivers by
re-reading the same offsets from the original queue.

Rules, as numbered steps:

  1. Pop: :func:`check_block` first — not blocked when there is no batch,
     when the request carries the batch's own ``attempt_id`` (a client retry
     of a receive whose response was lost re-reads the same batch at once,
     upstream #10827 / rocketmq-clients #708), or when every un-acked message
     is visible again (``now >= its next visible time``). A blocked queue is
     skipped and adds nothing to ``rest_num``.
  2. After reading, :func:`on_pop` records the batch; the caller commits the
     batch's first offset (the rewind point). Consumed counts: an offset that
     was in the previous batch gets ``previous count + 1`` — **unless** the
     attempt id is the same (a re-read of the same attempt, not a new
     delivery) — new offsets start at 0. Counts of offsets an earlier, longer
     batch handed out are carried (``carried_counts``) until they are re-read,
     so the reconsume count increments exactly once per redelivery even when
     batches shrink (upstream forgets them).
  3. Ack: :func:`on_ack` sets the bit and returns the next committed offset:
     the first un-acked offset of the batch, or ``last + 1`` when all are
     acked. An ack with a different pop time (an older batch) is ``STALE``,
     below the committed offset is ``STALE``, outside the batch ``NOT_IN_BATCH``.
     Without order info (lost in a crash) only an ack of exactly the committed
     offset advances it; upstream returns ``offset + 1`` for any ack, which
     can skip un-acked messages — we redeliver them instead.
  4. Change invisible time: :func:`change_invisible` moves one message's next
     visible time; the new handle keeps the batch's pop time, with
     ``invisible_ms = next visible - pop time`` (required by step 3).
  5. A server-side reset drops the order info (the caller forgets it).
  6. A FIFO read that scanned entries but matched none commits the scan's
     ``next_begin`` at once (:func:`commit_after_read`, upstream #9339/#8268),
     so a queue of only non-matching messages does not stall.

Callers: the popack services (FIFO pop, FIFO ack, FIFO change-invisible),
which persist the table periodically.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from popbroker.pop import checkpoints, errors


@dataclass(frozen=True, slots=True)
class OrderInfo:
    """The last FIFO batch of one queue."""

    queue_offsets: tuple[int, ...]
    pop_time_ms: int
    invisible_ms: int
    attempt_id: str | None
    acked_bitmap: int
    consumed_counts: tuple[int, ...]  # per message: deliveries before this one
    next_visible_ms: tuple[int, ...]  # per message: when it becomes visible again
    # Deliveries so far of offsets beyond this batch that earlier batches handed out
    # (a batch may be shorter than the last one); ≤ 32 (offset, deliveries) pairs.
    carried_counts: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        count = len(self.queue_offsets)
        if not 1 <= count <= checkpoints.MAX_CHECKPOINT_MESSAGES:
            raise errors.InvalidCheckpoint(f"a FIFO batch holds 1..32 messages, not {count}")
        if len(self.consumed_counts) != count or len(self.next_visible_ms) != count:
            raise errors.InvalidCheckpoint("per-message FIFO fields differ in length")
        if any(b <= a for a, b in zip(self.queue_offsets, self.queue_offsets[1:], strict=False)):
            raise errors.InvalidCheckpoint("FIFO batch offsets must increase")
        if not 0 <= self.acked_bitmap < (1 << count):
            raise errors.InvalidCheckpoint("FIFO ack bitmap has bits beyond the batch")


class FifoAckStatus(enum.Enum):
    """What a FIFO ack did."""

    ACKED = "acked"  # bit set (or already set); commit ``next_committed``
    STALE = "stale"  # an older batch or below the committed offset: ignore, succeed
    NOT_IN_BATCH = "not_in_batch"  # the offset is not in the current batch: illegal


@dataclass(frozen=True, slots=True)
class FifoAck:
    """Outcome of :func:`on_ack`."""

    status: FifoAckStatus
    info: OrderInfo | None
    next_committed_queue_offset: int | None


def check_block(info: OrderInfo | None, attempt_id: str | None, now_ms: int) -> bool:
    """True while the queue must not be popped (step 1)."""
    if info is None:
        return False
    if attempt_id is not None and attempt_id == info.attempt_id:
        return False
    return any(
        not info.acked_bitmap >> index & 1 and now_ms < info.next_visible_ms[index]
        for index in range(len(info.queue_offsets))
    )


def unblock_time_ms(info: OrderInfo | None) -> int | None:
    """When the queue unblocks by itself (latest next-visible time of un-acked messages)."""
    if info is None:
        return None
    times = [
        info.next_visible_ms[index]
        for index in range(len(info.queue_offsets))
        if not info.acked_bitmap >> index & 1
    ]
    return max(times) if times else None


def on_pop(
    previous: OrderInfo | None,
    *,
    queue_offsets: tuple[int, ...],
    pop_time_ms: int,
    invisible_ms: int,
    attempt_id: str | None,
) -> OrderInfo:
    """The order info after handing out ``queue_offsets`` (step 2)."""
    same_attempt = (
        previous is not None and attempt_id is not None and attempt_id == previous.attempt_id
    )
    delivered = _deliveries_so_far(previous, same_attempt=same_attempt)
    counts = tuple(delivered.get(queue_offset, 0) for queue_offset in queue_offsets)
    last = queue_offsets[-1] if queue_offsets else -1
    carried = tuple(sorted((q, n) for q, n in delivered.items() if q > last))
    return OrderInfo(
        carried_counts=carried[: checkpoints.MAX_CHECKPOINT_MESSAGES],
        queue_offsets=queue_offsets,
        pop_time_ms=pop_time_ms,
        invisible_ms=invisible_ms,
        attempt_id=attempt_id,
        acked_bitmap=0,
        consumed_counts=counts,
        next_visible_ms=tuple(pop_time_ms + invisible_ms for _ in queue_offsets),
    )


def _deliveries_so_far(previous: OrderInfo | None, *, same_attempt: bool) -> dict[int, int]:
    """How often each offset known to ``previous`` has been delivered.

    A same-attempt re-read does not count the previous batch as delivered (its
    response may never have reached the client).
    """
    if previous is None:
        return {}
    delivered = dict(previous.carried_counts)
    increment = 0 if same_attempt else 1
    for queue_offset, count in zip(previous.queue_offsets, previous.consumed_counts, strict=True):
        delivered[queue_offset] = count + increment
    return delivered


def reconsume_times(info: OrderInfo, queue_offset: int) -> int:
    """How many times the message at ``queue_offset`` was delivered before this batch."""
    for index, candidate in enumerate(info.queue_offsets):
        if candidate == queue_offset:
            return info.consumed_counts[index]
    raise errors.InvalidCheckpoint(f"queue offset {queue_offset} is not in the FIFO batch")


def on_ack(
    info: OrderInfo | None,
    *,
    queue_offset: int,
    pop_time_ms: int,
    committed_queue_offset: int | None,
) -> FifoAck:
    """Apply a FIFO ack (step 3); ``pop_time_ms`` comes from the handle."""
    if committed_queue_offset is not None and queue_offset < committed_queue_offset:
        return FifoAck(FifoAckStatus.STALE, info, None)
    if info is None:
        # No batch known (order info lost in a crash): only the message at the
        # committed offset may advance it; anything else is ignored and comes
        # back (upstream returns offset + 1 and could skip un-acked messages).
        if committed_queue_offset is not None and queue_offset == committed_queue_offset:
            return FifoAck(FifoAckStatus.ACKED, None, queue_offset + 1)
        return FifoAck(FifoAckStatus.STALE, None, None)
    if pop_time_ms != info.pop_time_ms:
        return FifoAck(FifoAckStatus.STALE, info, None)
    try:
        index = info.queue_offsets.index(queue_offset)
    except ValueError:
        return FifoAck(FifoAckStatus.NOT_IN_BATCH, info, None)
    acked = replace(info, acked_bitmap=info.acked_bitmap | 1 << index)
    return FifoAck(FifoAckStatus.ACKED, acked, next_committed(acked))


def next_committed(info: OrderInfo) -> int:
    """First un-acked offset of the batch, or one past its last offset when all are acked."""
    for index, queue_offset in enumerate(info.queue_offsets):
        if not info.acked_bitmap >> index & 1:
            return queue_offset
    return info.queue_offsets[-1] + 1


def change_invisible(
    info: OrderInfo, *, queue_offset: int, pop_time_ms: int, invisible_ms: int, now_ms: int
) -> tuple[OrderInfo, int]:
    """Make one message invisible until ``now + invisible_ms`` (step 4).

    Returns the new info and the ``invisible_ms`` for the new handle (counted
    from the batch's pop time). Raises :class:`InvalidReceiptHandle` for an
    older batch or an offset not in the batch.
    """
    if pop_time_ms != info.pop_time_ms:
        raise errors.InvalidReceiptHandle("FIFO handle of an older batch")
    try:
        index = info.queue_offsets.index(queue_offset)
    except ValueError:
        raise errors.InvalidReceiptHandle("queue offset not in the FIFO batch") from None
    visible_at = now_ms + invisible_ms
    times = list(info.next_visible_ms)
    times[index] = visible_at
    return replace(info, next_visible_ms=tuple(times)), visible_at - info.pop_time_ms


def commit_after_read(*, start_queue_offset: int, next_begin_queue_offset: int, found: bool) -> int:
    """The committed offset after a FIFO read (step 2 / step 6).

    With messages: the batch start (the rewind point). Without (all filtered
    out): ``next_begin_queue_offset``, so the filtered range is never rescanned.
    """
    return start_queue_offset if found else max(start_queue_offset, next_begin_queue_offset)
