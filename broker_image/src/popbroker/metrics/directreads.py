"""``popfleet_broker_store_reads_total{path}``: how a role with ``--data-dir`` reads.

The ``popack`` and ``revive`` roles given the store's data directory answer
``read`` and ``bounds`` from its files (:mod:`popbroker.store.direct`) and go to
the store role only for what the files cannot settle. ``path="direct"`` counts
the first, ``path="store"`` the second; both are read from the
:class:`~popbroker.store.direct.DirectReads` counts at scrape time. A ``store``
share that stays high means the role is not reading the volume (a wrong
``--data-dir``, or the volume not mounted there).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from popbroker.store.direct import DirectReads


class DirectReadsCollector(Collector):
    """The counter of one ``DirectReads``, collected at scrape time."""

    def __init__(self, direct: DirectReads) -> None:
        self._direct = direct

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "popfleet_broker_store_reads",
            "Reads and bounds with --data-dir: answered from the store's files (direct) or "
            "sent to the store role (store)",
            labels=["path"],
        )
        counts = self._direct.counts
        family.add_metric(["direct"], counts.answered)
        family.add_metric(["store"], counts.deferred)
        yield family


def observe_direct_reads(direct: DirectReads, registry: CollectorRegistry) -> None:
    registry.register(DirectReadsCollector(direct))
