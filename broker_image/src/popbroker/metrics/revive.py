"""Metrics of the revive role, read at scrape time.

  * ``popfleet_broker_revive_lag_messages{revive_queue}`` — revive-log records
    after the revive progress (written, not yet processed by revive).
  * ``popfleet_broker_revive_lag_seconds{revive_queue}`` — age of the oldest of them.
  * ``popfleet_broker_revive_pending_checkpoints{revive_queue}`` — checkpoints
    the revive ledger holds (waiting for acks or their revive time).
  * ``popfleet_broker_retry_messages{group}`` — unconsumed messages in the
    group's retry topics; ``popfleet_broker_dlq_messages{group}`` — messages in
    its dead-letter queue.

The numbers are those of the admin API's ``GetReviveStats``
(:func:`popbroker.inspect.inspecting.revive_stats`, the read model both share),
with the live ledgers of the revive workers in this process.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from prometheus_client import CollectorRegistry, Gauge

from popbroker.inspect import inspecting
from popbroker.pop.checkpointbuffer import BufferStats
from popbroker.pop.checkpoints import QueueKey
from popbroker.pop.reviving import LedgerStats
from popbroker.services.reviving import ReviveService
from popbroker.services.settings import wall_clock_ms
from popbroker.store.api import StoreApi


class _Ledgers:
    """The ``PopStateProvider`` part revive stats read: the workers' ledgers."""

    def __init__(self, service: ReviveService) -> None:
        self._service = service

    async def in_flight(self, queues: Sequence[QueueKey]) -> Mapping[QueueKey, int]:
        return {}

    async def revive_ledgers(self) -> Mapping[int, LedgerStats]:
        return {w.revive_queue_id: w.ledger.stats() for w in self._service.workers}

    async def checkpoint_buffer(self) -> BufferStats | None:
        return None


class ReviveMetrics:
    """The revive role's metrics in ``registry`` (see the module docstring)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def gauge(name: str, doc: str, label: str) -> Gauge:
            return Gauge(name, doc, [label], registry=registry)

        self.lag_messages = gauge(
            "popfleet_broker_revive_lag_messages",
            "Revive-log records not yet processed by revive",
            "revive_queue",
        )
        self.lag_seconds = gauge(
            "popfleet_broker_revive_lag_seconds",
            "Age of the oldest revive-log record not yet processed",
            "revive_queue",
        )
        self.pending = gauge(
            "popfleet_broker_revive_pending_checkpoints",
            "Checkpoints held by the revive ledger",
            "revive_queue",
        )
        self.retry = gauge(
            "popfleet_broker_retry_messages", "Unconsumed messages in retry topics", "group"
        )
        self.dlq = gauge("popfleet_broker_dlq_messages", "Messages in dead-letter queues", "group")
        self._store: StoreApi | None = None
        self._ledgers: _Ledgers | None = None

    def attach(self, store: StoreApi, service: ReviveService) -> None:
        self._store = store
        self._ledgers = _Ledgers(service)

    async def refresh(self) -> None:
        store, ledgers = self._store, self._ledgers
        if store is None or ledgers is None:
            return
        info = await store.info()
        stats = await inspecting.revive_stats(
            store, ledgers, cluster=info.cluster, now_ms=wall_clock_ms()
        )
        for gauge in (self.lag_messages, self.lag_seconds, self.pending, self.retry, self.dlq):
            gauge.clear()
        for queue in stats.queues:
            label = str(queue.revive_queue_id)
            self.lag_messages.labels(label).set(queue.lag_messages)
            self.lag_seconds.labels(label).set((queue.lag_ms or 0) / 1000)
            if queue.ledger is not None:
                self.pending.labels(label).set(queue.ledger.pending)
        for group in stats.groups:
            self.retry.labels(group.group).set(group.retry_messages)
            self.dlq.labels(group.group).set(group.dlq_messages)
