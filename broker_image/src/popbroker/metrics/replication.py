"""Metrics of a replicated store role (issue 18), read from its replica on each scrape.

* ``popfleet_replication_leader``: 1 while this replica leads its broker set.
* ``popfleet_replication_term``: the highest leadership term this replica has seen.
* ``popfleet_replication_in_sync_replicas``: the leader's recorded in-sync set, itself
  included (a follower exports none: the leader's is the set's).
* ``popfleet_replication_lag_bytes{follower}``, ``popfleet_replication_lag_seconds{follower}``:
  on the leader, how far each follower's acknowledged end is behind the log's end, and how
  long since it last held the end. ``follower`` is a replica name: at most two per set.
* ``popfleet_replication_term_changes_total``: terms this replica has seen begin.
* ``popfleet_replication_fenced_writes_total``: writes it refused because it did not lead.
* ``popfleet_replication_hand_overs_total``: planned hand-overs it did as leader.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from popbroker.replication.figures import ReplicationFigures


class ReplicationCollector(Collector):
    """The figures of one replica as metric families (module docstring)."""

    def __init__(self, figures: Callable[[], ReplicationFigures]) -> None:
        self._figures = figures

    def collect(self) -> Iterator[Metric]:
        now = self._figures()
        yield GaugeMetricFamily(
            "popfleet_replication_leader",
            "1 while this replica leads its broker set",
            value=int(now.leading),
        )
        yield GaugeMetricFamily(
            "popfleet_replication_term", "Highest leadership term this replica has seen",
            value=now.term,
        )  # fmt: skip
        if now.leading:
            yield GaugeMetricFamily(
                "popfleet_replication_in_sync_replicas",
                "Replicas in the recorded in-sync set, the leader included",
                value=len(now.in_sync),
            )
        lag_bytes = GaugeMetricFamily(
            "popfleet_replication_lag_bytes",
            "Bytes of the leader's log a follower has not acknowledged",
            labels=["follower"],
        )
        for name, lag in sorted(now.lag_bytes.items()):
            lag_bytes.add_metric([name], lag)
        yield lag_bytes
        lag_seconds = GaugeMetricFamily(
            "popfleet_replication_lag_seconds",
            "Seconds since a follower last held the leader's end",
            labels=["follower"],
        )
        for name, lag_ms in sorted(now.lag_ms.items()):
            lag_seconds.add_metric([name], lag_ms / 1000)
        yield lag_seconds
        yield CounterMetricFamily(
            "popfleet_replication_term_changes",
            "Leadership terms this replica has seen begin since it started",
            value=now.term_changes,
        )
        yield CounterMetricFamily(
            "popfleet_replication_fenced_writes",
            "Writes refused because this replica did not lead its broker set",
            value=now.fenced_writes,
        )
        yield CounterMetricFamily(
            "popfleet_replication_hand_overs",
            "Planned hand-overs of leadership this replica did (a rolling update's)",
            value=now.hand_overs,
        )


def observe_replication(
    figures: Callable[[], ReplicationFigures], registry: CollectorRegistry
) -> ReplicationCollector:
    """Register a collector of ``figures`` in ``registry``."""
    collector = ReplicationCollector(figures)
    registry.register(collector)
    return collector
