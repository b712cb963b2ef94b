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

Modules: the worker of one revive queue (steps 1, 2, 4, 5) is
:mod:`popbroker.services.revivequeue`; step 3 is :mod:`popbroker.services.redelivery`.

The loop (:meth:`ReviveService.run`) runs a step whenever the queue gets new
records (store arrivals) and at least every ``idle_tick_ms``, so a message
reappears well within 1 s of its invisible deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from popbroker.services.configcache import ConfigCache
from popbroker.services.revivequeue import ReviveQueueWorker, StepReport
from popbroker.services.settings import Clock, ReviveRoleSettings
from popbroker.store import names
from popbroker.store.api import StoreApi
from popbroker.store.errors import NotLeader, StoreError

log = logging.getLogger(__name__)

__all__ = ["ReviveQueueWorker", "ReviveService", "StepReport"]


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
            except NotLeader:  # this pod's replica follows: nothing to redeliver here now
                log.debug("revive queue %d: idle, not leading", worker.revive_queue_id)
                report = None
            except StoreError as exc:
                log.warning("revive queue %d: step failed: %s", worker.revive_queue_id, exc)
                report = None
            if report is not None and not report.reached_end and report.scanned:
                continue  # more to scan: no waiting
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wakeup.wait(), tick_s)

    async def _pump(self) -> None:
        topic = names.revive_topic(self._settings.cluster)
        stream = self._store.arrivals(topic)
        try:
            async for arrival in stream:  # of the revive topic only (Store.arrivals)
                event = self._wakeups.get(arrival.queue_id)
                if event is not None:
                    event.set()
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
