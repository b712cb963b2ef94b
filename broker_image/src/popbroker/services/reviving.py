"""The revive role: tail the revive queues and redeliver what nobody acked.

One :class:`ReviveQueueWorker` per revive queue of ``rmq_sys_REVIVE_LOG_<cluster>``
drives a :class:`~popbroker.pop.reviving.ReviveLedger` (CKs and ACKs) and a
:class:`~popbroker.services.delaying.DelayLedger` (DELAY messages). One step:

  1. Note ``t0 = now``, then read the queue from the ledger's scanned end,
     ``scan_batch`` records at a time, feeding ``ck``/``ack``/``bAck`` records
     to the ledger, ``delay`` records to the delay ledger and anything else
     (malformed, unknown) to ``observe_other`` — counted, never stalling. Stop
     at the end of the queue (or when the ledger is full).
  2. Only when the scan reached the end is ``t0`` a time at which every record
     appended before it has been seen, so ``ledger.due(t0)`` cannot revive a
     CK whose ack is already in the log (the ledger adds a grace for acks
     still on their way through popack).
  3. For each due task read every un-acked message back — in one read when
     the task's offsets lie within ``MAX_REVIVE_READ_SPAN``, else (and for any
     offset that read missed) one by one
     (:func:`~popbroker.pop.reviving.verify_revive_read`: a message the
     retention removed or a re-created topic no longer has is skipped, never
     retried forever) and append copies to the group's retry topic with
     ``reconsume_times + 1`` — or to ``%DLQ%<group>`` past the group's
     ``max_reconsume_times`` (:func:`~popbroker.pop.retrytopics.retry_or_dlq`)
     — in one store call, then ``complete`` the task; on failure ``fail`` it
     (back-off, only the offsets not yet copied are retried).
  4. Deliver due DELAY records: read each back, append the message to its
     topic and queue, complete it.
  5. Persist progress: ``min(ledger.safe_revive_offset(), oldest pending
     delay)`` as the committed offset of group ``CID_RMQ_SYS_REVIVE_GROUP`` on
     the revive queue. Everything before it is resolved, so long runs of ACK
     records never hold it back (upstream #3443/#5408); a restart re-scans from
     it and at worst revives a CK twice (a duplicate, never a loss).

The loop (:meth:`ReviveService.run`) runs a step whenever the queue gets new
records (store arrivals) and at least every ``idle_tick_ms``, so a message
reappears well within 1 s of its invisible deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from popbroker.pop import errors as pop_errors
from popbroker.pop import records, retrytopics
from popbroker.pop.reviving import ReadVerdict, ReviveLedger, ReviveTask, verify_revive_read
from popbroker.services import messages, revivelog
from popbroker.services.configcache import ConfigCache
from popbroker.services.delaying import DelayLedger
from popbroker.services.settings import REVIVE_GROUP, Clock, ReviveRoleSettings
from popbroker.store import names
from popbroker.store.api import MessageToAppend, ReadStatus, StoreApi, StoredMessage
from popbroker.store.errors import StoreError

log = logging.getLogger(__name__)

MAX_REVIVE_READ_SPAN = 1024  # the store's largest read


@dataclass(frozen=True, slots=True)
class StepReport:
    """What one step did (for tests and metrics)."""

    reached_end: bool
    scanned: int
    revived: int  # copies appended to retry topics
    dead_lettered: int  # copies appended to DLQs
    delayed_delivered: int
    failed_tasks: int


class ReviveQueueWorker:
    """Revive for one revive queue (see the module docstring)."""

    def __init__(
        self,
        *,
        store: StoreApi,
        config: ConfigCache,
        settings: ReviveRoleSettings,
        revive_queue_id: int,
        start_revive_queue_offset: int,
        clock: Clock,
    ) -> None:
        self._store = store
        self._config = config
        self._settings = settings
        self._clock = clock
        self.revive_queue_id = revive_queue_id
        self._topic = names.revive_topic(settings.cluster)
        self.ledger = ReviveLedger(
            revive_queue_id=revive_queue_id,
            local_broker_name=settings.broker_name,
            start_revive_queue_offset=start_revive_queue_offset,
            settings=settings.ledger,
        )
        self.delays = DelayLedger()
        self._persisted = start_revive_queue_offset

    @classmethod
    async def open(
        cls,
        *,
        store: StoreApi,
        config: ConfigCache,
        settings: ReviveRoleSettings,
        revive_queue_id: int,
        clock: Clock,
    ) -> ReviveQueueWorker:
        """A worker starting at the persisted progress (or the queue's minimum)."""
        topic = names.revive_topic(settings.cluster)
        start = await store.committed_offset(REVIVE_GROUP, topic, revive_queue_id)
        if start is None:
            start = (await store.bounds(topic, revive_queue_id)).min_queue_offset
        return cls(
            store=store,
            config=config,
            settings=settings,
            revive_queue_id=revive_queue_id,
            start_revive_queue_offset=start,
            clock=clock,
        )

    @property
    def persisted_offset(self) -> int:
        """The progress last written to the store."""
        return self._persisted

    async def step(self) -> StepReport:
        """Steps 1-5 once."""
        t0, scanned, reached_end = await self._scan()
        revived = dead = delivered = failed = 0
        if reached_end or not self.ledger.has_capacity:
            revived, dead, failed = await self._revive_due(t0)
            delivered = await self._deliver_delays(t0)
        await self._persist()
        return StepReport(reached_end, scanned, revived, dead, delivered, failed)

    def next_deadline_ms(self) -> int | None:
        """When a pending DELAY record is due (CK deadlines are polled every idle tick)."""
        return self.delays.next_due_ms()

    # -- step 1: scan ------------------------------------------------------------------------

    async def _scan(self) -> tuple[int, int, bool]:
        scanned = 0
        while True:
            t0 = self._clock()
            if not self.ledger.has_capacity:
                return t0, scanned, False
            start = self.ledger.scanned_end
            result = await self._store.read(
                self._topic,
                self.revive_queue_id,
                start,
                max_count=self._settings.scan_batch,
                max_scan=self._settings.scan_batch,
            )
            if result.status is ReadStatus.OFFSET_TOO_SMALL:
                log.warning(
                    "revive queue %d: records [%d, %d) were removed by retention",
                    self.revive_queue_id,
                    start,
                    result.next_queue_offset,
                )
                self.ledger.observe_other(result.next_queue_offset - 1)
                continue
            if not result.messages:
                return t0, scanned, True
            for message in result.messages:
                self._observe(message)
                scanned += 1
            if result.next_queue_offset >= result.max_queue_offset:
                return t0, scanned, True

    def _observe(self, message: StoredMessage) -> None:
        position = message.queue_offset
        if position < self.ledger.scanned_end:
            return  # already seen (a read that overlapped the previous one)
        tag = message.tag
        if tag == revivelog.DELAY_TAG:
            delay = revivelog.parse_delay(message)
            if delay is None:
                self.ledger.observe_other(position)
            else:
                self.ledger.observe_other(position)
                self.delays.observe(position, delay.deliver_ms)
            return
        try:
            record = records.decode(tag, message.body, revive_queue_id=self.revive_queue_id)
        except pop_errors.MalformedRecord as exc:
            log.warning(
                "revive queue %d: skipping record %d: %s", self.revive_queue_id, position, exc
            )
            self.ledger.observe_other(position)
            return
        if isinstance(record, records.AckRecord):
            self.ledger.observe_ack(record, position)
        else:
            self.ledger.observe_ck(record, position)

    # -- step 3: revive ----------------------------------------------------------------------

    async def _revive_due(self, now_ms: int) -> tuple[int, int, int]:
        revived = dead = failed = 0
        for task in self.ledger.due(now_ms, limit=self._settings.max_tasks_per_round):
            outcome = await self._revive(task)
            if outcome is None:
                failed += 1
            else:
                revived += outcome[0]
                dead += outcome[1]
        return revived, dead, failed

    async def _revive(self, task: ReviveTask) -> tuple[int, int] | None:
        ck = task.checkpoint
        group = await self._config.group_or_none(ck.group)
        original = retrytopics.original_topic(ck.topic)
        topic_exists = group is not None and (await self._config.any_topic(original)) is not None
        copies: list[MessageToAppend] = []
        done: list[int] = []
        failed: list[int] = []
        dead = 0
        found = await self._read_span(ck.topic, ck.queue_id, task.queue_offsets, topic_exists)
        for queue_offset in task.queue_offsets:
            verdict, message = found.get(queue_offset) or await self._read_back(
                ck.topic, ck.queue_id, queue_offset, topic_exists
            )
            if verdict is ReadVerdict.RETRY_LATER:
                failed.append(queue_offset)
                continue
            if verdict is not ReadVerdict.REPUT or message is None or group is None:
                log.info("revive: %s offset %d skipped (%s)", ck.key, queue_offset, verdict.value)
                done.append(queue_offset)
                continue
            target = retrytopics.retry_or_dlq(
                group=ck.group,
                topic=ck.topic,
                reconsume_times=message.reconsume_times,
                max_reconsume_times=group.max_reconsume_times,
            )
            dead += target.dead_letter
            copies.append(
                _copy(message, target, original_topic=original, pop_time_ms=ck.pop_time_ms)
            )
            done.append(queue_offset)
        try:
            if copies:
                await self._store.append(copies)
        except StoreError as exc:
            log.warning("revive: re-put of %s failed: %s", ck.key, exc)
            self.ledger.fail(task, self._clock())
            return None
        if failed:
            self.ledger.fail(task, self._clock(), succeeded_queue_offsets=tuple(done))
            return None
        self.ledger.complete(task)
        return len(copies) - dead, dead

    async def _read_span(
        self, topic: str, queue_id: int, queue_offsets: tuple[int, ...], topic_exists: bool
    ) -> dict[int, tuple[ReadVerdict, StoredMessage | None]]:
        """The task's messages in one read when they lie close together (the usual case).

        Offsets the read does not return (removed, beyond max, a gap) are left out:
        the caller judges those one by one with :meth:`_read_back`.
        """
        if not topic_exists or not queue_offsets:
            return {}
        first, last = queue_offsets[0], queue_offsets[-1]
        span = last - first + 1
        if span > MAX_REVIVE_READ_SPAN:
            return {}
        result = await self._store.read(topic, queue_id, first, max_count=span, max_scan=span)
        wanted = set(queue_offsets)
        found: dict[int, tuple[ReadVerdict, StoredMessage | None]] = {}
        for message in result.messages:
            if message.queue_offset in wanted:
                verdict = verify_revive_read(
                    expected_queue_offset=message.queue_offset,
                    min_queue_offset=result.min_queue_offset,
                    max_queue_offset=result.max_queue_offset,
                    read_queue_offset=message.queue_offset,
                )
                found[message.queue_offset] = (verdict, message)
        return found

    async def _read_back(
        self, topic: str, queue_id: int, queue_offset: int, topic_exists: bool
    ) -> tuple[ReadVerdict, StoredMessage | None]:
        if not topic_exists:
            return ReadVerdict.SKIP_TOPIC_GONE, None
        result = await self._store.read(topic, queue_id, queue_offset, max_count=1, max_scan=1)
        if result.status is ReadStatus.NO_SUCH_QUEUE:
            return ReadVerdict.SKIP_TOPIC_GONE, None
        message = result.messages[0] if result.messages else None
        verdict = verify_revive_read(
            expected_queue_offset=queue_offset,
            min_queue_offset=result.min_queue_offset,
            max_queue_offset=result.max_queue_offset,
            read_queue_offset=None if message is None else message.queue_offset,
        )
        return verdict, message

    # -- step 4: delays ----------------------------------------------------------------------

    async def _deliver_delays(self, now_ms: int) -> int:
        delivered = 0
        for position in self.delays.due(now_ms, limit=self._settings.max_tasks_per_round):
            result = await self._store.read(
                self._topic, self.revive_queue_id, position, max_count=1, max_scan=1
            )
            found = [m for m in result.messages if m.queue_offset == position]
            delay = revivelog.parse_delay(found[0]) if found else None
            if delay is None:
                log.warning(
                    "revive queue %d: delay record %d is gone", self.revive_queue_id, position
                )
                self.delays.complete(position)
                continue
            try:
                await self._store.append(
                    [
                        MessageToAppend(
                            topic=delay.topic,
                            queue_id=delay.queue_id,
                            body=delay.body,
                            properties=delay.properties,
                            born_timestamp_ms=delay.born_timestamp_ms,
                            born_host=delay.born_host,
                        )
                    ]
                )
            except StoreError as exc:
                if not exc.retriable:  # the topic is gone or the record is illegal: drop it
                    log.warning("delay record %d dropped: %s", position, exc)
                    self.delays.complete(position)
                continue
            self.delays.complete(position)
            delivered += 1
        return delivered

    # -- step 5: progress --------------------------------------------------------------------

    async def _persist(self) -> None:
        safe = self.ledger.safe_revive_offset()
        oldest_delay = self.delays.oldest_pending_offset()
        if oldest_delay is not None:
            safe = min(safe, oldest_delay)
        if safe == self._persisted:
            return
        try:
            await self._store.commit_offset(REVIVE_GROUP, self._topic, self.revive_queue_id, safe)
        except StoreError as exc:
            log.warning(
                "revive queue %d: persisting progress failed: %s", self.revive_queue_id, exc
            )
            return
        self._persisted = safe


def _copy(
    message: StoredMessage,
    target: retrytopics.RetryTarget,
    *,
    original_topic: str,
    pop_time_ms: int,
) -> MessageToAppend:
    properties = dict(message.properties)
    properties.setdefault(messages.PROPERTY_ORIGIN_TOPIC, original_topic)
    properties.setdefault(messages.PROPERTY_FIRST_POP_TIME, str(pop_time_ms))
    return MessageToAppend(
        topic=target.topic,
        queue_id=target.queue_id,
        body=message.body,
        properties=properties,
        born_timestamp_ms=message.born_timestamp_ms,
        born_host=message.born_host,
        reconsume_times=target.reconsume_times,
        flags=message.flags,
    )


class ReviveService:
    """Every revive queue of one broker, woken by arrivals and a tick."""

    def __init__(
        self, *, store: StoreApi, settings: ReviveRoleSettings, clock: Clock, config: ConfigCache
    ) -> None:
        self._store = store
        self._settings = settings
        self._clock = clock
        self._config = config
        self.workers: list[ReviveQueueWorker] = []
        self._wakeups: dict[int, asyncio.Event] = {}

    async def open(self) -> None:
        """Create one worker per revive queue, at its persisted progress."""
        topic = names.revive_topic(self._settings.cluster)
        config = await self._config.any_topic(topic)
        if config is None:
            config = (await self._config.refresh()).topics.get(topic)
        if config is None:
            raise StoreError(f"the store has no revive topic {topic!r}")
        self.workers = [
            await ReviveQueueWorker.open(
                store=self._store,
                config=self._config,
                settings=self._settings,
                revive_queue_id=queue_id,
                clock=self._clock,
            )
            for queue_id in range(config.queue_nums)
        ]
        self._wakeups = {w.revive_queue_id: asyncio.Event() for w in self.workers}

    async def step_all(self) -> list[StepReport]:
        """One step of every worker (tests drive the role with this)."""
        return [await worker.step() for worker in self.workers]

    async def run(self, stop: asyncio.Event) -> None:
        """Run every worker and the arrival pump until ``stop`` is set."""
        if not self.workers:
            await self.open()
        pump = asyncio.create_task(self._pump(), name="revive-arrivals")
        workers = [
            asyncio.create_task(self._run_worker(w, stop), name=f"revive-{w.revive_queue_id}")
            for w in self.workers
        ]
        try:
            await stop.wait()
        finally:
            pump.cancel()
            for task in workers:
                task.cancel()
            for task in (pump, *workers):
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _run_worker(self, worker: ReviveQueueWorker, stop: asyncio.Event) -> None:
        wakeup = self._wakeups[worker.revive_queue_id]
        tick_s = self._settings.idle_tick_ms / 1000
        while not stop.is_set():
            wakeup.clear()
            try:
                report = await worker.step()
            except StoreError as exc:
                log.warning("revive queue %d: step failed: %s", worker.revive_queue_id, exc)
                report = None
            if report is not None and not report.reached_end and report.scanned:
                continue  # more to scan: no waiting
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wakeup.wait(), tick_s)

    async def _pump(self) -> None:
        topic = names.revive_topic(self._settings.cluster)
        stream = self._store.arrivals()
        try:
            async for arrival in stream:
                if arrival.topic == topic:
                    event = self._wakeups.get(arrival.queue_id)
                    if event is not None:
                        event.set()
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
