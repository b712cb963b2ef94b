"""Consumer lag and the store's volume, read at scrape time (issue 19: what alerts and KEDA
scale on).

* ``popfleet_broker_consumer_lag_messages{group,topic}``: messages of ``topic`` on this
  broker that ``group`` has not consumed, summed over the queues it has committed on. Per
  queue it is popfleet's one lag definition (``popfleet_api.models.QueueOffsets``, the
  audit, the CLI): ``max - max(committed, min)``, never negative, and only where the group
  has committed an offset (Burrow's and kafka-lag-exporter's rule). In POP mode the broker
  commits as it pops, so a message popped and not yet acked is not lag: it is
  ``popfleet_broker_inflight_messages``. System topics (retry, DLQ, revive log) are left
  out; retry and DLQ depths are ``popfleet_broker_retry_messages`` and ``…_dlq_messages``.
  Labels: one series per (group, topic) the group consumes, never per queue or per client
  (a fleet of 1,000 groups on 8 queues is 1,000 series per broker, not 8,000).
* ``popfleet_broker_consumer_committed_offset{group,topic}``: the group's committed queue
  offsets on ``topic``, summed over the same queues. Only its movement means anything: a
  group with lag whose committed offsets do not move for a window has stalled (Burrow's
  STALL, the alert PopfleetConsumerStalled), which lag alone cannot tell when nothing new
  is written (the lag is flat, not growing). Raw offsets, not ``max(committed, min)``:
  retention trimming a stalled queue must not look like progress.
* ``popfleet_store_volume_available_bytes``, ``popfleet_store_volume_size_bytes``: the
  filesystem of the store's data directory (``statvfs``), as an unprivileged process may
  use it: the alert "disk nearly full" reads these, not the kubelet's volume stats, which
  some storage drivers do not report.

A replicated set's followers export no lag (their offsets trail the leader's by up to a
snapshot interval and nothing is consumed from them): sum the series by group and topic.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from popbroker.store import names
from popbroker.store.api import CommittedOffset, QueueBounds, StoreApi
from popbroker.store.errors import UnknownTopic


def queue_lag(bounds: QueueBounds, committed_queue_offset: int) -> int:
    """One queue's lag for a group that committed ``committed_queue_offset`` on it."""
    start = max(bounds.min_queue_offset, committed_queue_offset)
    return max(0, bounds.max_queue_offset - start)


def lag_by_group_topic(
    rows: Iterable[CommittedOffset], bounds: Mapping[tuple[str, int], QueueBounds]
) -> dict[tuple[str, str], int]:
    """(group, topic) -> lag summed over the queues in ``rows`` that still exist
    (``bounds``); system topics are left out (module docstring)."""
    lags: dict[tuple[str, str], int] = {}
    for row in rows:
        if names.is_system_topic(row.topic):
            continue
        queue = bounds.get((row.topic, row.queue_id))
        if queue is None:  # the topic or queue went: nothing left to consume
            continue
        key = (row.group, row.topic)
        lags[key] = lags.get(key, 0) + queue_lag(queue, row.queue_offset)
    return lags


def committed_by_group_topic(
    rows: Iterable[CommittedOffset], bounds: Mapping[tuple[str, int], QueueBounds]
) -> dict[tuple[str, str], int]:
    """(group, topic) -> committed queue offsets summed over the same queues as
    :func:`lag_by_group_topic` (module docstring)."""
    sums: dict[tuple[str, str], int] = {}
    for row in rows:
        if names.is_system_topic(row.topic) or (row.topic, row.queue_id) not in bounds:
            continue
        key = (row.group, row.topic)
        sums[key] = sums.get(key, 0) + row.queue_offset
    return sums


class ConsumerLagMetrics:
    """``popfleet_broker_consumer_lag_messages`` and ``…_committed_offset`` in ``registry``;
    :meth:`refresh` before each scrape. ``serving``: False on a follower, which exports none
    (module docstring)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        store: StoreApi,
        *,
        serving: Callable[[], bool] = lambda: True,
    ) -> None:
        self._store = store
        self._serving = serving
        self.lag = Gauge(
            "popfleet_broker_consumer_lag_messages",
            "Messages a consumer group has not consumed, per topic, summed over the queues "
            "it has committed on (max - max(committed, min))",
            ["group", "topic"],
            registry=registry,
        )
        self.committed = Gauge(
            "popfleet_broker_consumer_committed_offset",
            "A consumer group's committed queue offsets on a topic, summed over the queues it "
            "has committed on (only its movement matters: none while lagging = stalled)",
            ["group", "topic"],
            registry=registry,
        )

    async def refresh(self) -> None:
        self.lag.clear()  # a deleted group or topic loses its series
        self.committed.clear()
        if not self._serving():
            return
        rows = await self._store.committed_offsets()
        rows = [r for r in rows if not names.is_system_topic(r.topic)]
        bounds: dict[tuple[str, int], QueueBounds] = {}
        for key in {(r.topic, r.queue_id) for r in rows}:
            try:
                bounds[key] = await self._store.bounds(*key)
            except UnknownTopic:  # deleted between the two reads
                continue
        for (group, topic), lag in sorted(lag_by_group_topic(rows, bounds).items()):
            self.lag.labels(group, topic).set(lag)
        for (group, topic), offset in sorted(committed_by_group_topic(rows, bounds).items()):
            self.committed.labels(group, topic).set(offset)


class VolumeCollector(Collector):
    """The data directory's filesystem, by ``statvfs`` on each scrape (module docstring)."""

    def __init__(self, data_dir: Path) -> None:
        self._data_dir = data_dir

    def collect(self) -> Iterator[Metric]:
        fs = os.statvfs(self._data_dir)
        yield GaugeMetricFamily(
            "popfleet_store_volume_available_bytes",
            "Bytes an unprivileged process may still write on the store's data volume",
            value=fs.f_bavail * fs.f_frsize,
        )
        yield GaugeMetricFamily(
            "popfleet_store_volume_size_bytes",
            "Size of the store's data volume",
            value=fs.f_blocks * fs.f_frsize,
        )


def observe_volume(data_dir: Path, registry: CollectorRegistry) -> VolumeCollector:
    collector = VolumeCollector(data_dir)
    registry.register(collector)
    return collector
