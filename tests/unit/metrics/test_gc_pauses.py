"""popfleet_broker_gc_pause_seconds: each collection's duration, by generation."""

from __future__ import annotations

import gc

from prometheus_client import CollectorRegistry

from popbroker.metrics.gcpauses import GcPauses

NAME = "popfleet_broker_gc_pause_seconds"


def _sample(registry: CollectorRegistry, suffix: str, generation: str) -> float:
    value = registry.get_sample_value(f"{NAME}_{suffix}", {"generation": generation})
    return 0.0 if value is None else value


def test_a_collection_is_observed_from_its_start_to_its_stop() -> None:
    now = [10.0]
    registry = CollectorRegistry()
    pauses = GcPauses(registry, clock=lambda: now[0])
    pauses("start", {"generation": 2})
    now[0] += 0.3
    pauses("stop", {"generation": 2, "collected": 0, "uncollectable": 0})
    assert _sample(registry, "count", "2") == 1
    assert abs(_sample(registry, "sum", "2") - 0.3) < 1e-9
    assert registry.get_sample_value(f"{NAME}_bucket", {"generation": "2", "le": "0.25"}) == 0
    assert registry.get_sample_value(f"{NAME}_bucket", {"generation": "2", "le": "0.5"}) == 1
    assert _sample(registry, "count", "0") == 0


def test_a_stop_without_a_start_is_not_observed() -> None:
    registry = CollectorRegistry()
    pauses = GcPauses(registry, clock=lambda: 1.0)
    pauses("stop", {"generation": 1, "collected": 0, "uncollectable": 0})
    assert _sample(registry, "count", "1") == 0


def test_installed_it_sees_real_collections_and_removed_it_does_not() -> None:
    registry = CollectorRegistry()
    pauses = GcPauses(registry)
    pauses.install()
    pauses.install()  # once only
    try:
        assert gc.callbacks.count(pauses) == 1
        gc.collect()
        assert _sample(registry, "count", "2") == 1
    finally:
        pauses.remove()
    gc.collect()
    assert _sample(registry, "count", "2") == 1
    assert pauses not in gc.callbacks
