"""Metrics of the store role: commit-log fsync and config-file rewrite latencies.

* ``popfleet_store_flush_seconds``: the store's flusher calls every observer
  registered with :meth:`popbroker.store.flushing.Flusher.on_flush` with each
  flush's latency in milliseconds, on its own thread; :func:`observe_flushes`
  registers one that feeds the histogram (one ``observe`` per flush, thread-safe
  in ``prometheus_client``).
* ``popfleet_store_config_write_seconds``: one observation per rewrite (and fsync)
  of ``config/metadata.json`` (:meth:`popbroker.store.local.LocalStore.on_config_write`),
  fed by :func:`observe_config_writes`. Its ``_count`` against the admin API's
  write calls shows how many config changes each rewrite carried (group commit).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram

from popbroker.store.flushing import Flusher
from popbroker.store.local import LocalStore

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


def observe_config_writes(store: LocalStore, registry: CollectorRegistry) -> Histogram:
    """Feed ``store``'s config-file rewrite latencies to a new histogram in ``registry``."""
    histogram = Histogram(
        "popfleet_store_config_write_seconds",
        "Rewrite (with fsync) of the store's config file, one per group of config changes",
        buckets=FLUSH_BUCKETS_S,
        registry=registry,
    )
    store.on_config_write(lambda latency_ms: histogram.observe(latency_ms / 1000))
    return histogram
