"""One revive queue's worker: scan, revive, deliver delays, persist progress.

A :class:`ReviveQueueWorker` runs steps 1-5 of :mod:`popbroker.services.reviving`
for one revive queue: it owns the queue's
:class:`~popbroker.pop.reviving.ReviveLedger` (CKs and ACKs) and
:class:`~popbroker.services.delaying.DelayLedger` (DELAY messages), scans new
records into them, hands due checkpoints to
:class:`~popbroker.services.redelivery.Redeliverer` (step 3), delivers due
DELAY records (step 4) and commits the safe revive offset (step 5).

Callers: :class:`popbroker.services.reviving.ReviveService`; tests drive
:meth:`ReviveQueueWorker.step` directly.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from popbroker.pop import records, revivelog
from popbroker.pop.checkpoints import Checkpoint
from popbroker.pop.reviving import ReviveLedger
from popbroker.services.configcache import ConfigCache
from popbroker.services.delaying import DelayLedger
from popbroker.services.redelivery import Redeliverer
from popbroker.services.settings import Clock, ReviveRoleSettings
from popbroker.store import names
from popbroker.store.api import MessageToAppend, ReadStatus, StoreApi, StoredMessage
from popbroker.store.errors import NotLeader, StoreError

log = logging.getLogger(__name__)


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
        self._redeliverer = Redeliverer(
            store=store, config=config, settings=settings, ledger=self.ledger, clock=clock
        )

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
        start = await store.committed_offset(
            group=names.REVIVE_GROUP, topic=topic, queue_id=revive_queue_id
        )
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

    async def step(self) -> StepReport:
        """Steps 1-5 once."""
        t0, scanned, reached_end = await self._scan()
        revived = dead = delivered = failed = 0
        if reached_end or not self.ledger.has_capacity:
            revived, dead, failed = await self._redeliverer.revive_due(t0)
            delivered = await self._deliver_delays(t0)
        await self._persist()
        return StepReport(reached_end, scanned, revived, dead, delivered, failed)

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
        decoded = self._decode(message)
        if isinstance(decoded, records.AckRecord):
            self.ledger.observe_ack(decoded, position)
        elif isinstance(decoded, Checkpoint):
            self.ledger.observe_ck(decoded, position)
        else:
            self.ledger.observe_other(position)
            if isinstance(decoded, revivelog.Delay):
                self.delays.observe(position, decoded.deliver_ms)
            elif message.tag != revivelog.DELAY_TAG:  # a bad delay record is skipped quietly
                log.warning(
                    "revive queue %d: skipping record %d: %s",
                    self.revive_queue_id,
                    position,
                    decoded.reason,
                )

    def _decode(self, message: StoredMessage) -> revivelog.Decoded:
        return revivelog.decode(
            message.tag, message.properties, message.body, revive_queue_id=self.revive_queue_id
        )

    # -- step 4: delays ----------------------------------------------------------------------

    async def _deliver_delays(self, now_ms: int) -> int:
        delivered = 0
        for position in self.delays.due(now_ms, limit=self._settings.max_tasks_per_round):
            result = await self._store.read(
                self._topic, self.revive_queue_id, position, max_count=1, max_scan=1
            )
            found = [m for m in result.messages if m.queue_offset == position]
            delay = self._decode(found[0]) if found else None
            if not isinstance(delay, revivelog.Delay):
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
                            body=found[0].body,
                            properties=delay.original_properties,
                            born_timestamp_ms=found[0].born_timestamp_ms,
                            born_host=found[0].born_host,
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
            await self._store.commit_offset(
                group=names.REVIVE_GROUP,
                topic=self._topic,
                queue_id=self.revive_queue_id,
                queue_offset=safe,
            )
        except NotLeader:  # a follower's: its leader's progress arrives by replication
            return
        except StoreError as exc:
            log.warning(
                "revive queue %d: persisting progress failed: %s", self.revive_queue_id, exc
            )
            return
        self._persisted = safe
