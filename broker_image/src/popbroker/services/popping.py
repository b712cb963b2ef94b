"""One pop attempt: visit the request's queues, read, checkpoint, hand out.

Purpose: the I/O around :mod:`popbroker.pop.popping`. A receive calls
:meth:`Popper.pop` once, and again after each long-polling wake-up.

One attempt, as numbered steps (DESIGN §3.2, fact sheet §1.3-§1.5):

  1. Pick ``pop_time = now``, the revive queue (round-robin; 999 for FIFO) and
     ``random_percent``; plan the visits (retry topic first in 1 of 5
     requests, else as filler; FIFO never reads the retry topic).
  2. Per queue: try its lock without waiting (contended → skipped, counted in
     ``rest_num``). Under the lock compute the pop offset — the buffer's pop
     cursor when there is one (it is never behind the committed offset while
     this process runs), else the committed offset, else the initial offset,
     which is then committed so a restart does not move it — and read at most
     the rest of the batch with the request's tag filter.
  3. Non-FIFO: register one checkpoint for the messages read
     (:class:`~popbroker.pop.checkpointbuffer.CheckpointBuffer.add`). A scan
     that matched nothing registers a "just offset" entry so the committed
     offset passes the filtered range in order. ``REJECTED`` (buffer full)
     returns nothing from that queue.
  4. FIFO: skip a blocked queue (remember when it unblocks), pop from the
     committed offset, record the batch in the queue's order info; a message
     already delivered ``max_reconsume_times + 1`` times goes to the DLQ and is
     acked instead of delivered (4b, :meth:`Popper._dead_letter_fifo`).
  5. Unlock; after the last queue — also when a read failed or the receive was
     cancelled — append every ``WRITE_NOW`` checkpoint in one store call and
     mark them durable (acks merged meanwhile follow as one ack record). A
     failed append leaves them in the buffer, due at once: the flush loop
     retries, and the committed offset waits for them.

Self-healing reads (fact sheet §1.4): a pop offset below the queue's minimum
(retention) skips to the minimum through a just-offset entry; one beyond the
maximum (topic re-created) forgets the queue's cursor and commits the maximum.

Callers: :mod:`popbroker.services.receiving`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from popbroker.pop import checkpoints, orderinfo, receipts, retrytopics
from popbroker.pop import popping as planning
from popbroker.pop.checkpointbuffer import Admission
from popbroker.pop.checkpoints import Checkpoint, QueueKey
from popbroker.services import messages, revivelog
from popbroker.services.messages import DeliveredMessage
from popbroker.services.popstate import PopState
from popbroker.services.settings import PopackSettings
from popbroker.store.api import MessageToAppend, ReadResult, ReadStatus, StoreApi, StoredMessage
from popbroker.store.errors import StoreError, UnknownTopic

log = logging.getLogger(__name__)

FIFO_DEAD_LETTER_ROUNDS = 4


@dataclass(frozen=True, slots=True)
class PopRequest:
    """A validated pop of one group on one topic."""

    group: str
    topic: str
    queue_id: int  # -1: every queue of the topic on this broker
    read_queue_num: int
    max_messages: int
    invisible_ms: int
    tag_filter: str = "*"
    fifo: bool = False
    attempt_id: str | None = None
    max_reconsume_times: int = retrytopics.DEFAULT_MAX_RECONSUME_TIMES  # FIFO dead letters


@dataclass(frozen=True, slots=True)
class PopOutcome:
    """What one attempt handed out."""

    messages: tuple[DeliveredMessage, ...]
    rest_num: int  # backlog seen behind this attempt (0: nothing more to wake anyone for)
    retry_at_ms: int | None = None  # FIFO: when the earliest blocked queue unblocks


@dataclass
class _Attempt:
    request: PopRequest
    pop_time_ms: int
    revive_queue_id: int
    delivered: list[DeliveredMessage] = field(default_factory=list)
    rest_num: int = 0
    retry_at_ms: int | None = None
    write_now: list[Checkpoint] = field(default_factory=list)


class Popper:
    """Pops for one popack role (see the module docstring)."""

    def __init__(self, *, store: StoreApi, state: PopState, settings: PopackSettings) -> None:
        self._store = store
        self._state = state
        self._settings = settings

    def now_ms(self) -> int:
        """The role's clock."""
        return self._state.clock()

    async def pop(self, request: PopRequest) -> PopOutcome:
        """Run one attempt of ``request`` (steps 1-5)."""
        state = self._state
        now_ms = state.clock()
        attempt = _Attempt(
            request=request,
            pop_time_ms=now_ms,
            revive_queue_id=planning.choose_revive_queue_id(
                state.next_request_seq(),
                revive_queue_num=self._settings.revive_queue_num,
                fifo=request.fifo,
            ),
        )
        visits = planning.plan_visits(
            topic=request.topic,
            group=request.group,
            queue_id=request.queue_id,
            read_queue_num=request.read_queue_num,
            random_percent=state.rng.randrange(100),
            fifo=request.fifo,
        )
        try:
            for visit in visits:
                if planning.remaining_batch(request.max_messages, len(attempt.delivered)) == 0:
                    attempt.rest_num += 1  # unknown backlog; enough to wake another poller
                    break
                key = QueueKey(visit.topic, request.group, visit.queue_id)
                token = state.locks.try_lock(key)
                if token is None:
                    attempt.rest_num += 1
                    continue
                try:
                    if request.fifo:
                        await self._visit_fifo(attempt, key)
                    else:
                        await self._visit(attempt, key, is_retry=visit.is_retry)
                finally:
                    state.locks.unlock(key, token)
        finally:
            # Step 5 runs even when a later read failed or the client gave up (the
            # handler is cancelled): a WRITE_NOW checkpoint left unresolved would hold
            # its queue's committed offset back for good. Shielded, so a cancellation
            # interrupts only the wait, never the append and its bookkeeping.
            if attempt.write_now:
                await asyncio.shield(asyncio.ensure_future(self._write_now(attempt.write_now)))
        return PopOutcome(
            messages=tuple(attempt.delivered),
            rest_num=attempt.rest_num,
            retry_at_ms=attempt.retry_at_ms,
        )

    # -- concurrent (non-FIFO) queues --------------------------------------------------------

    async def _visit(self, attempt: _Attempt, key: QueueKey, *, is_retry: bool) -> None:
        buffer = self._state.buffer
        start = buffer.latest_begin_offset(key)
        if start is None:
            start = await self._committed_or_init(key)
            if start is None:
                return  # the (retry) topic does not exist yet
        result = await self._read(attempt, key, start)
        if result.status is ReadStatus.OFFSET_TOO_SMALL:
            buffer.add_just_offset(
                key, queue_offset=start, next_begin_queue_offset=result.next_queue_offset
            )
            start = result.next_queue_offset
            result = await self._read(attempt, key, start)
        elif result.status is ReadStatus.OFFSET_OVERFLOW_BADLY:
            log.warning("pop offset %d beyond the max of %s; resetting to max", start, key)
            buffer.clear_queue(key)
            await self._store.commit_offset(
                key.group, key.topic, key.queue_id, result.next_queue_offset
            )
            return
        attempt.rest_num += max(0, result.max_queue_offset - result.next_queue_offset)
        if not result.messages:
            if result.next_queue_offset > start:
                buffer.add_just_offset(
                    key, queue_offset=start, next_begin_queue_offset=result.next_queue_offset
                )
            return
        request = attempt.request
        ck = checkpoints.from_queue_offsets(
            (m.queue_offset for m in result.messages),
            topic=key.topic,
            group=key.group,
            queue_id=key.queue_id,
            start_queue_offset=start,
            pop_time_ms=attempt.pop_time_ms,
            invisible_ms=request.invisible_ms,
            revive_queue_id=attempt.revive_queue_id,
            broker_name=self._settings.broker_name,
        )
        admission = buffer.add(
            ck, next_begin_queue_offset=result.next_queue_offset, now_ms=self._state.clock()
        )
        if admission is Admission.REJECTED:
            attempt.rest_num += len(result.messages)
            return
        if admission is Admission.WRITE_NOW:
            attempt.write_now.append(ck)
        topic_type = receipts.TopicType.RETRY_V2 if is_retry else receipts.TopicType.NORMAL
        for message in result.messages:
            attempt.delivered.append(
                self._delivered(
                    attempt,
                    message,
                    start_queue_offset=start,
                    topic_type=topic_type,
                    delivery_attempt=message.reconsume_times + 1,
                )
            )

    async def _write_now(self, cks: list[Checkpoint]) -> None:
        if not cks:
            return
        buffer = self._state.buffer
        cluster = self._settings.cluster
        try:
            await self._store.append([revivelog.ck_message(cluster, ck) for ck in cks])
        except StoreError as exc:
            log.warning("writing %d checkpoints failed (%s); the flush loop retries", len(cks), exc)
            now_ms = self._state.clock()
            for ck in cks:
                buffer.flush_failed(ck.key, now_ms)
            return
        late = [
            revivelog.record_message(cluster, ack, revive_queue_id=ck.revive_queue_id)
            for ck in cks
            if (ack := buffer.mark_durable(ck.key)) is not None
        ]
        if late:
            try:
                await self._store.append(late)
            except StoreError as exc:  # the acks are lost: their messages come back (duplicates)
                log.warning("writing %d late acks failed: %s", len(late), exc)

    # -- FIFO queues -------------------------------------------------------------------------

    async def _visit_fifo(self, attempt: _Attempt, key: QueueKey) -> None:
        # A batch made only of dead letters delivers nothing but moves the queue on:
        # read again (bounded) so the receive is not answered empty while the next
        # message waits.
        for _ in range(FIFO_DEAD_LETTER_ROUNDS):
            if not await self._visit_fifo_once(attempt, key):
                return

    async def _visit_fifo_once(self, attempt: _Attempt, key: QueueKey) -> bool:
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
            return False
        start = await self._committed_or_init(key)
        if start is None:
            return False
        result = await self._read(attempt, key, start)
        if result.status in (ReadStatus.OFFSET_TOO_SMALL, ReadStatus.OFFSET_OVERFLOW_BADLY):
            state.order_infos.pop(key, None)
            await self._store.commit_offset(
                key.group, key.topic, key.queue_id, result.next_queue_offset
            )
            start = result.next_queue_offset
            result = await self._read(attempt, key, start)
        attempt.rest_num += max(0, result.max_queue_offset - result.next_queue_offset)
        if not result.messages:
            if result.next_queue_offset > start:  # filtered range: skip it for good
                await self._store.commit_offset(
                    key.group, key.topic, key.queue_id, result.next_queue_offset
                )
            return False
        info = orderinfo.on_pop(
            info,
            queue_offsets=tuple(m.queue_offset for m in result.messages),
            pop_time_ms=attempt.pop_time_ms,
            invisible_ms=request.invisible_ms,
            attempt_id=request.attempt_id,
        )
        state.order_infos[key] = info
        live = await self._dead_letter_fifo(attempt, key, info, result.messages, start=start)
        for message in live:
            attempt.delivered.append(
                self._delivered(
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

    async def _dead_letter_fifo(
        self,
        attempt: _Attempt,
        key: QueueKey,
        info: orderinfo.OrderInfo,
        read: tuple[StoredMessage, ...],
        *,
        start: int,
    ) -> list[StoredMessage]:
        """Step 4b: past the group's maximum, a FIFO message goes to the DLQ, not the client.

        FIFO messages are redelivered from their own queue, never revived, so the
        check happens here (as the proxy's pop filter does, fact sheet §6.6): a
        message already delivered ``max_reconsume_times + 1`` times is copied to
        ``%DLQ%<group>`` and acked in the order info, which moves the queue on.
        """
        limit = attempt.request.max_reconsume_times
        dead = [
            m
            for m in read
            if orderinfo.reconsume_times(info, m.queue_offset) + m.reconsume_times > limit
        ]
        if not dead:
            return list(read)
        await self._store.append(
            [
                MessageToAppend(
                    topic=retrytopics.dlq_topic(key.group),
                    queue_id=0,
                    body=m.body,
                    properties={
                        **m.properties,
                        messages.PROPERTY_ORIGIN_TOPIC: key.topic,
                    },
                    born_timestamp_ms=m.born_timestamp_ms,
                    born_host=m.born_host,
                    reconsume_times=orderinfo.reconsume_times(info, m.queue_offset)
                    + m.reconsume_times,
                    flags=m.flags,
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
            await self._store.commit_offset(key.group, key.topic, key.queue_id, committed)
        dead_offsets = {m.queue_offset for m in dead}
        return [m for m in read if m.queue_offset not in dead_offsets]

    # -- helpers -----------------------------------------------------------------------------

    async def _committed_or_init(self, key: QueueKey) -> int | None:
        store = self._store
        committed = await store.committed_offset(key.group, key.topic, key.queue_id)
        if committed is not None:
            return committed
        try:
            bounds = await store.bounds(key.topic, key.queue_id)
        except UnknownTopic:
            return None
        start = planning.init_queue_offset(
            topic=key.topic,
            init_mode=planning.InitMode.MAX,
            min_queue_offset=bounds.min_queue_offset,
            max_queue_offset=bounds.max_queue_offset,
        )
        await store.commit_offset(key.group, key.topic, key.queue_id, start)
        return start

    async def _read(self, attempt: _Attempt, key: QueueKey, start: int) -> ReadResult:
        request = attempt.request
        return await self._store.read(
            key.topic,
            key.queue_id,
            start,
            max_count=planning.remaining_batch(request.max_messages, len(attempt.delivered)),
            tag_filter=request.tag_filter,
        )

    def _delivered(
        self,
        attempt: _Attempt,
        message: StoredMessage,
        *,
        start_queue_offset: int,
        topic_type: receipts.TopicType,
        delivery_attempt: int,
    ) -> DeliveredMessage:
        request = attempt.request
        handle = receipts.ReceiptHandle(
            start_queue_offset=start_queue_offset,
            pop_time_ms=attempt.pop_time_ms,
            invisible_ms=request.invisible_ms,
            revive_queue_id=attempt.revive_queue_id,
            topic_type=topic_type,
            broker_name=self._settings.broker_name,
            queue_id=message.queue_id,
            queue_offset=message.queue_offset,
            physical_offset=message.physical_offset,
        )
        return DeliveredMessage(
            topic=request.topic,
            stored=message,
            receipt_handle=receipts.encode(handle),
            delivery_attempt=delivery_attempt,
            invisible_ms=request.invisible_ms,
        )
