"""FIFO queues of a pop attempt (step 4 of :mod:`popbroker.services.popping`).

Rules (DESIGN §3.2, fact sheet §1.5, §6.6):

  * A queue whose last batch is still in flight is blocked: it is skipped, and
    the attempt remembers the earliest unblock time so a parked receive
    re-attempts then. The same ``attempt_id`` re-reads its batch.
  * A FIFO pop always starts at the committed offset (never the retry topic);
    the batch is recorded in the queue's order info.
  * A pop offset outside the queue (retention, re-created topic) resets the
    order info and commits the queue's next offset; a scan that matched nothing
    commits past the filtered range (:func:`popbroker.pop.orderinfo.commit_after_read`).
  * Dead letters (4b): a message already delivered ``max_reconsume_times + 1``
    times (:func:`popbroker.pop.retrytopics.exhausted`) is appended as its
    dead-letter copy (:func:`popbroker.pop.retrytopics.dead_letter`) and acked
    in the order info instead of delivered; a batch made only of dead letters
    reads again (at most ``FIFO_DEAD_LETTER_ROUNDS`` times) so the next
    message is not held back.

Callers: :class:`popbroker.services.popping.Popper`.
"""

from __future__ import annotations

from popbroker.pop import orderinfo, receipts, retrytopics
from popbroker.pop import popping as planning
from popbroker.pop.checkpoints import QueueKey
from popbroker.pop.popping import VisitOutcome
from popbroker.services import messages
from popbroker.services.popattempt import Attempt, QueueReader
from popbroker.services.popstate import PopState
from popbroker.store.api import ReadStatus, StoreApi, StoredMessage

FIFO_DEAD_LETTER_ROUNDS = 4


class FifoVisitor:
    """Visits FIFO queues for the pops of one popack role (see the module docstring)."""

    def __init__(self, *, store: StoreApi, state: PopState, reader: QueueReader) -> None:
        self._store = store
        self._state = state
        self._reader = reader

    async def visit(self, attempt: Attempt, key: QueueKey) -> None:
        """Pop from the FIFO queue ``key`` into ``attempt`` (the caller holds its lock)."""
        # A batch made only of dead letters delivers nothing but moves the queue on:
        # read again (bounded) so the receive is not answered empty while the next
        # message waits.
        for _ in range(FIFO_DEAD_LETTER_ROUNDS):
            if not await self._visit_once(attempt, key):
                return

    async def _visit_once(self, attempt: Attempt, key: QueueKey) -> bool:
        """One FIFO read of the queue; True when only dead letters were read (read again)."""
        state = self._state
        request = attempt.request
        info = state.order_infos.get(key)
        if orderinfo.check_block(info, request.attempt_id, state.clock()):
            unblock = orderinfo.unblock_time_ms(info)
            if unblock is not None and (
                attempt.retry_at_ms is None or unblock < attempt.retry_at_ms
            ):
                attempt.retry_at_ms = unblock
            attempt.rest_num += planning.rest_contribution(VisitOutcome.FIFO_BLOCKED)
            return False
        start = await self._reader.pop_start(key, pop_cursor=None)  # FIFO: no buffer cursor
        if start is None:
            return False
        result = await self._reader.read(attempt, key, start)
        if result.status in (ReadStatus.OFFSET_TOO_SMALL, ReadStatus.OFFSET_OVERFLOW_BADLY):
            state.order_infos.pop(key, None)
            await self._store.commit_offset(
                group=key.group,
                topic=key.topic,
                queue_id=key.queue_id,
                queue_offset=result.next_queue_offset,
            )
            start = result.next_queue_offset
            result = await self._reader.read(attempt, key, start)
        attempt.rest_num += planning.rest_contribution(
            VisitOutcome.READ,
            max_queue_offset=result.max_queue_offset,
            pop_queue_offset=start,
            next_begin_queue_offset=result.next_queue_offset,
        )
        # The committed offset is ``start`` (the rewind point); a scan that matched
        # nothing moves it past the filtered range for good.
        committed = orderinfo.commit_after_read(
            start_queue_offset=start,
            next_begin_queue_offset=result.next_queue_offset,
            found=bool(result.messages),
        )
        if committed != start:
            await self._store.commit_offset(
                group=key.group, topic=key.topic, queue_id=key.queue_id, queue_offset=committed
            )
        if not result.messages:
            return False
        info = orderinfo.on_pop(
            info,
            queue_offsets=tuple(m.queue_offset for m in result.messages),
            pop_time_ms=attempt.pop_time_ms,
            invisible_ms=request.invisible_ms,
            attempt_id=request.attempt_id,
        )
        state.order_infos[key] = info
        live = await self._dead_letter(attempt, key, info=info, read=result.messages, start=start)
        for message in live:
            attempt.delivered.append(
                self._reader.delivered(
                    attempt,
                    message,
                    start_queue_offset=start,
                    topic_type=receipts.TopicType.NORMAL,
                    delivery_attempt=orderinfo.reconsume_times(info, message.queue_offset)
                    + message.reconsume_times
                    + 1,
                )
            )
        return not live

    async def _dead_letter(
        self,
        attempt: Attempt,
        key: QueueKey,
        *,
        info: orderinfo.OrderInfo,
        read: tuple[StoredMessage, ...],
        start: int,
    ) -> list[StoredMessage]:
        """Dead letters: past the group's maximum, a FIFO message goes to the DLQ, not the client.

        FIFO messages are redelivered from their own queue, never revived, so the
        check happens here (as the proxy's pop filter does, fact sheet §6.6): a
        message already delivered ``max_reconsume_times + 1`` times is copied to
        ``%DLQ%<group>`` and acked in the order info, which moves the queue on.
        """
        limit = attempt.request.max_reconsume_times

        def delivered_times(message: StoredMessage) -> int:  # deliveries before this one
            return orderinfo.reconsume_times(info, message.queue_offset) + message.reconsume_times

        dead = [m for m in read if retrytopics.exhausted(delivered_times(m), limit)]
        if not dead:
            return list(read)
        await self._store.append(
            [
                messages.dead_letter_copy(
                    m,
                    retrytopics.dead_letter(
                        group=key.group,
                        original_topic=key.topic,
                        properties=m.properties,
                        delivered_times=delivered_times(m),
                    ),
                )
                for m in dead
            ]
        )
        committed = start
        for message in dead:
            acked = orderinfo.on_ack(
                info,
                queue_offset=message.queue_offset,
                pop_time_ms=attempt.pop_time_ms,
                committed_queue_offset=committed,
            )
            if acked.info is not None:
                info = acked.info
            if acked.next_committed_queue_offset is not None:
                committed = max(committed, acked.next_committed_queue_offset)
        self._state.order_infos[key] = info
        if committed > start:
            await self._store.commit_offset(
                group=key.group, topic=key.topic, queue_id=key.queue_id, queue_offset=committed
            )
        dead_offsets = {m.queue_offset for m in dead}
        return [m for m in read if m.queue_offset not in dead_offsets]
