"""One pop attempt: visit the request's queues, read, checkpoint, hand out.

Purpose: the I/O around :mod:`popbroker.pop.popping`. A receive calls
:meth:`Popper.pop` once, and again after each long-polling wake-up.

One attempt, as numbered steps (DESIGN §3.2, fact sheet §1.3-§1.5):

  1. Pick ``pop_time = now``, the revive queue (round-robin; 999 for FIFO) and
     ``random_percent``; plan the visits (retry topic first in 1 of 5
     requests, else as filler; FIFO never reads the retry topic).
  2. Per queue: try its lock without waiting (contended → skipped). Under the
     lock compute the pop offset (:func:`~popbroker.pop.popping.pop_offset`:
     the buffer's pop cursor when there is one, else the committed offset,
     else the initial offset, which is then committed so a restart does not
     move it) and read at most the rest of the batch with the request's tag
     filter. Every visit adds its
     :func:`~popbroker.pop.popping.rest_contribution` to ``rest_num``.
  3. Non-FIFO: register one checkpoint for the messages read
     (:class:`~popbroker.pop.checkpointbuffer.CheckpointBuffer.add`). A scan
     that matched nothing registers a "just offset" entry so the committed
     offset passes the filtered range in order. ``REJECTED`` (buffer full)
     returns nothing from that queue. The in-flight guard
     (:class:`~popbroker.pop.popping.InflightCounter`, threshold
     ``pop_inflight_threshold``) caps the read at the queue's room and skips a
     queue without room (counted in ``PopOutcome.throttled``).
  4. FIFO: skip a blocked queue (remember when it unblocks), pop from the
     committed offset, record the batch in the queue's order info; a message
     already delivered ``max_reconsume_times + 1`` times goes to the DLQ and is
     acked instead of delivered (4b, :mod:`popbroker.services.fifopopping`).
  5. Unlock; after the last queue — also when a read failed or the receive was
     cancelled — append every ``WRITE_NOW`` checkpoint in one store call and
     mark them durable (acks merged meanwhile follow as one ack record). A
     failed append leaves them in the buffer, due at once: the flush loop
     retries, and the committed offset waits for them.

Self-healing reads (fact sheet §1.4): a pop offset below the queue's minimum
(retention) skips to the minimum through a just-offset entry; one beyond the
maximum (topic re-created) forgets the queue's cursor and commits the maximum.

Modules: the request/outcome values and the shared queue reads live in
:mod:`popbroker.services.popattempt`; FIFO visits (step 4) in
:mod:`popbroker.services.fifopopping`.

Callers: :mod:`popbroker.services.receiving`.
"""

from __future__ import annotations

import asyncio
import logging

from popbroker.pop import checkpoints, receipts
from popbroker.pop import popping as planning
from popbroker.pop.checkpointbuffer import Admission
from popbroker.pop.checkpoints import Checkpoint, QueueKey
from popbroker.pop.popping import VisitOutcome
from popbroker.services import revivelog
from popbroker.services.fifopopping import FifoVisitor
from popbroker.services.popattempt import Attempt, PopOutcome, PopRequest, QueueReader
from popbroker.services.popstate import PopState
from popbroker.services.settings import PopackSettings
from popbroker.store.api import ReadStatus, StoreApi
from popbroker.store.errors import StoreError

log = logging.getLogger(__name__)

__all__ = ["PopOutcome", "PopRequest", "Popper"]


class Popper:
    """Pops for one popack role (see the module docstring)."""

    def __init__(self, *, store: StoreApi, state: PopState, settings: PopackSettings) -> None:
        self._store = store
        self._state = state
        self._settings = settings
        self._reader = QueueReader(store=store, settings=settings)
        self._fifo = FifoVisitor(store=store, state=state, reader=self._reader)

    def now_ms(self) -> int:
        """The role's clock."""
        return self._state.clock()

    async def pop(self, request: PopRequest) -> PopOutcome:
        """Run one attempt of ``request`` (steps 1-5)."""
        state = self._state
        now_ms = state.clock()
        attempt = Attempt(
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
                    attempt.rest_num += planning.rest_contribution(VisitOutcome.BATCH_FULL)
                    break
                key = QueueKey(visit.topic, request.group, visit.queue_id)
                token = state.locks.try_lock(key)
                if token is None:
                    attempt.rest_num += planning.rest_contribution(VisitOutcome.LOCKED)
                    continue
                try:
                    if request.fifo:
                        await self._fifo.visit(attempt, key)
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
            throttled=attempt.throttled,
        )

    # -- concurrent (non-FIFO) queues --------------------------------------------------------

    async def _visit(self, attempt: Attempt, key: QueueKey, *, is_retry: bool) -> None:
        buffer = self._state.buffer
        start = await self._reader.pop_start(key, pop_cursor=buffer.latest_begin_offset(key))
        if start is None:
            return  # the (retry) topic does not exist yet
        inflight = self._state.inflight
        room = inflight.room(key, self._settings.pop_inflight_threshold, self._state.clock())
        if room == 0:  # the in-flight guard: skip the queue, count its backlog
            attempt.throttled += 1
            bounds = await self._store.bounds(key.topic, key.queue_id)
            attempt.rest_num += planning.rest_contribution(
                VisitOutcome.OVER_THRESHOLD,
                max_queue_offset=bounds.max_queue_offset,
                pop_queue_offset=start,
            )
            return
        result = await self._reader.read(attempt, key, start, limit=room)
        if result.status is ReadStatus.OFFSET_TOO_SMALL:
            buffer.add_just_offset(
                key, queue_offset=start, next_begin_queue_offset=result.next_queue_offset
            )
            start = result.next_queue_offset
            result = await self._reader.read(attempt, key, start, limit=room)
        elif result.status is ReadStatus.OFFSET_OVERFLOW_BADLY:
            log.warning("pop offset %d beyond the max of %s; resetting to max", start, key)
            buffer.clear_queue(key)
            inflight.clear(key)
            await self._store.commit_offset(
                group=key.group,
                topic=key.topic,
                queue_id=key.queue_id,
                queue_offset=result.next_queue_offset,
            )
            return
        read_rest = planning.rest_contribution(
            VisitOutcome.READ,
            max_queue_offset=result.max_queue_offset,
            pop_queue_offset=start,
            next_begin_queue_offset=result.next_queue_offset,
        )
        if not result.messages:
            attempt.rest_num += read_rest
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
        if admission is Admission.REJECTED:  # nothing returned: the read counts as backlog
            attempt.rest_num += planning.rest_contribution(
                VisitOutcome.REJECTED,
                max_queue_offset=result.max_queue_offset,
                pop_queue_offset=start,
            )
            return
        attempt.rest_num += read_rest
        if admission is Admission.WRITE_NOW:
            attempt.write_now.append(ck)
        inflight.on_pop(
            ck.key,
            [m.queue_offset for m in result.messages],
            until_ms=attempt.pop_time_ms + request.invisible_ms,
        )
        topic_type = receipts.TopicType.RETRY_V2 if is_retry else receipts.TopicType.NORMAL
        for message in result.messages:
            attempt.delivered.append(
                self._reader.delivered(
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
