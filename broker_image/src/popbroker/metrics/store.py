"""Metrics of the store role: ``popfleet_store_flush_seconds``, the commit-log fsync latency.

The store's flusher thread already records each flush's latency in
``Flusher.flush_latencies_ms`` (a bounded list). :func:`observe_flushes` swaps
that list for an :class:`ObservingList` that also feeds the histogram, so the
store's code is not touched and its hot path gains one ``observe`` per flush
(thread-safe in ``prometheus_client``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Histogram

FLUSH_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class ObservingList(list[float]):
    """A list of milliseconds whose appends are also observed (in seconds) by a histogram."""

    def __init__(self, histogram: Histogram, initial: Iterable[float] = ()) -> None:
        super().__init__(initial)
        self._histogram = histogram

    def append(self, value: float, /) -> None:
        super().append(value)
        self._histogram.observe(value / 1000)


def flush_histogram(registry: CollectorRegistry) -> Histogram:
    return Histogram(
        "popfleet_store_flush_seconds",
        "Commit-log flush (fsync) latency",
        buckets=FLUSH_BUCKETS_S,
        registry=registry,
    )


def observe_flushes(store: Any, registry: CollectorRegistry) -> Histogram | None:
    """Feed ``store``'s flush latencies to a new histogram; None for a store with no flusher."""
    flusher = getattr(store, "flusher", None)
    if flusher is None or not isinstance(getattr(flusher, "flush_latencies_ms", None), list):
        return None
    histogram = flush_histogram(registry)
    flusher.flush_latencies_ms = ObservingList(histogram, flusher.flush_latencies_ms)
    return histogram
