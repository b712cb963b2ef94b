"""Changing invisible time: the new one-message checkpoint, the old ack, the new handle.

Purpose: ``ChangeInvisibleDuration`` delays (or hastens) the redelivery of one
popped message. Non-FIFO, it is "write a new one-message CK, then ack the old
handle" (fact sheet §4.3); this module plans both and the handle returned to
the client. FIFO handles go through :func:`popbroker.pop.orderinfo.change_invisible`.

Steps (the services layer performs the I/O in this order):

  1. Validate the new invisible time against
     :data:`popbroker.pop.popping.CHANGE_INVISIBLE_BOUNDS` and the message's
     queue offset against the queue: ``min <= queue_offset < max``, **strictly
     below max** (upstream #9187: at max a CK for a non-existent message was
     created) → :class:`QueueOffsetOutOfRange` otherwise.
  2. Build the new CK: ``pop_time = max(now, old pop time + 1)``,
     ``start_queue_offset`` = the
     message's own queue offset, diffs ``(0,)``, same topic (the retry topic
     for a retried message), group, queue, revive queue and broker. The pop
     time is forced past the old one so the new CK's match key can never equal
     the old CK's key: otherwise a change in the same millisecond as the pop
     (of the batch's first message) would be acked away by step 3 — a loss.
  3. Append the new CK to the revive log — **not** to the checkpoint buffer:
     it starts behind the queue's pop cursor and belongs to no pop's commit
     order — **then** ack the old handle (:attr:`InvisibilityChange.old_ack_key` /
     ``queue_offset`` through the buffer, or an ACK record). A crash between
     the two yields a duplicate, never a loss.
  4. Return the new handle: start offset = the message's own offset (so an ack
     with it matches the new CK — the proxy bug behind upstream #9583 kept the
     old start offset and the ack never matched), new pop time and invisible
     time, everything else unchanged.

:class:`SupersededHandles` lets the services refuse the old handle afterwards
(the official clients expect ``INVALID_RECEIPT_HANDLE`` for it) without
keeping per-message state forever: an entry lives until the old handle's
deadline, when acking it becomes harmless anyway, and the table is bounded.

Callers: the popack services' ChangeInvisibleDuration handler.
"""

from __future__ import annotations

import heapq
from dataclasses import replace

from popbroker.pop import errors, popping
from popbroker.pop.checkpoints import Checkpoint, CheckpointKey
from popbroker.pop.receipts import ReceiptHandle
from popbroker.values import per_message


@per_message
class InvisibilityChange:
    """The plan of one change of invisible time."""

    checkpoint: Checkpoint  # step 3: make durable first
    old_ack_key: CheckpointKey  # step 3: then ack queue_offset of this CK
    queue_offset: int
    handle: ReceiptHandle  # step 4: the client's new handle


def plan_change(
    old: ReceiptHandle,
    *,
    topic: str,
    group: str,
    new_invisible_ms: int,
    now_ms: int,
    min_queue_offset: int,
    max_queue_offset: int,
    bounds: popping.InvisibleTimeBounds = popping.CHANGE_INVISIBLE_BOUNDS,
) -> InvisibilityChange:
    """Plan a non-FIFO change of invisible time for the message of ``old``.

    ``topic`` is the real topic of the message (the retry topic when
    ``old.is_retry``). Raises :class:`IllegalInvisibleTime`,
    :class:`QueueOffsetOutOfRange`, or :class:`InvalidReceiptHandle` for a FIFO
    handle.
    """
    if old.is_fifo:
        raise errors.InvalidReceiptHandle("FIFO handles change invisible time via order info")
    popping.validate_invisible_ms(new_invisible_ms, bounds)
    if not min_queue_offset <= old.queue_offset < max_queue_offset:
        raise errors.QueueOffsetOutOfRange(
            f"queue offset {old.queue_offset} outside [{min_queue_offset}, {max_queue_offset})"
        )
    pop_time_ms = max(now_ms, old.pop_time_ms + 1)
    ck = Checkpoint(
        topic=topic,
        group=group,
        queue_id=old.queue_id,
        start_queue_offset=old.queue_offset,
        pop_time_ms=pop_time_ms,
        invisible_ms=new_invisible_ms,
        revive_queue_id=old.revive_queue_id,
        broker_name=old.broker_name,
        queue_offset_diffs=(0,),
    )
    old_key = CheckpointKey(
        topic=topic,
        group=group,
        queue_id=old.queue_id,
        start_queue_offset=old.start_queue_offset,
        pop_time_ms=old.pop_time_ms,
        broker_name=old.broker_name,
    )
    handle = replace(
        old,
        start_queue_offset=old.queue_offset,
        pop_time_ms=pop_time_ms,
        invisible_ms=new_invisible_ms,
    )
    return InvisibilityChange(
        checkpoint=ck, old_ack_key=old_key, queue_offset=old.queue_offset, handle=handle
    )


def handle_key(handle: ReceiptHandle, *, topic: str, group: str) -> CheckpointKey:
    """The checkpoint key an ack with ``handle`` for a message of ``topic`` matches."""
    return CheckpointKey(
        topic=topic,
        group=group,
        queue_id=handle.queue_id,
        start_queue_offset=handle.start_queue_offset,
        pop_time_ms=handle.pop_time_ms,
        broker_name=handle.broker_name,
    )


_HandleId = tuple[CheckpointKey, int]


class SupersededHandles:
    """Bounded memory of handles replaced by a change of invisible time."""

    def __init__(self, *, max_entries: int = 100_000) -> None:
        self._max_entries = max_entries
        self._expiry: dict[_HandleId, int] = {}
        self._heap: list[tuple[int, _HandleId]] = []

    def add(
        self, key: CheckpointKey, queue_offset: int, *, expires_at_ms: int, now_ms: int
    ) -> None:
        """Remember that the handle (``key``, ``queue_offset``) was replaced."""
        self._expire(now_ms)
        while len(self._expiry) >= self._max_entries and self._heap:
            _, oldest = heapq.heappop(self._heap)  # evict the soonest to expire
            self._expiry.pop(oldest, None)
        handle_id = (key, queue_offset)
        self._expiry[handle_id] = expires_at_ms
        heapq.heappush(self._heap, (expires_at_ms, handle_id))

    def is_superseded(self, key: CheckpointKey, queue_offset: int, now_ms: int) -> bool:
        """True when the handle was replaced and its old deadline has not passed."""
        expires_at_ms = self._expiry.get((key, queue_offset))
        return expires_at_ms is not None and now_ms < expires_at_ms

    def _expire(self, now_ms: int) -> None:
        while self._heap and self._heap[0][0] <= now_ms:
            expires_at_ms, handle_id = heapq.heappop(self._heap)
            if self._expiry.get(handle_id) == expires_at_ms:
                del self._expiry[handle_id]

    def __len__(self) -> int:
        return len(self._expiry)


def superseded_until_ms(old: ReceiptHandle) -> int:
    """How long to remember a replaced handle: until its old deadline (the old CK's revive time)."""
    return old.next_visible_ms
