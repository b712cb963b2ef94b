"""Metrics of the store role: ``popfleet_store_flush_seconds``, the commit-log fsync latency.

The store's flusher calls every observer registered with
:meth:`popbroker.store.flushing.Flusher.on_flush` with each flush's latency in
milliseconds, on its own thread; :func:`observe_flushes` registers one that
feeds the histogram (one ``observe`` per flush, thread-safe in
``prometheus_client``).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram

from popbroker.store.flushing import Flusher

FLUSH_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


def flush_histogram(registry: CollectorRegistry) -> Histogram:
    return Histogram(
        "popfleet_store_flush_seconds",
        "Commit-log flush (fsync) latency",
        buckets=FLUSH_BUCKETS_S,
        registry=registry,
    )


def observe_flushes(flusher: Flusher, registry: CollectorRegistry) -> Histogram:
    """Feed ``flusher``'s flush latencies to a new histogram in ``registry``."""
    histogram = flush_histogram(registry)
    flusher.on_flush(lambda latency_ms: histogram.observe(latency_ms / 1000))
    return histogram
