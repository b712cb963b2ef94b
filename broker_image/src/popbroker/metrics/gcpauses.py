"""``popfleet_broker_gc_pause_seconds{generation}``: how long the garbage collector held the
process, per collection.

A broker role is one event loop: while a collection runs, no call is answered, so a long
full collection is a latency spike for every client at once (the send idempotency window
once made them 40-412 ms; docs/design/2026-11-28-compiled-core.md). The histogram is fed
from ``gc.callbacks``: the clock at each collection's start and stop. Full collections are
generation 2; a p99 of generation 2 near a client's latency target is what to look at.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Histogram

BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class GcPauses:
    """A ``gc.callbacks`` entry that observes each collection's duration (install/remove)."""

    def __init__(
        self, registry: CollectorRegistry, *, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self._clock = clock
        self._started: float | None = None
        self._pauses = Histogram(
            "popfleet_broker_gc_pause_seconds",
            "How long each garbage collection held the role's process, by generation "
            "(2: a full collection)",
            ["generation"],
            buckets=BUCKETS_S,
            registry=registry,
        )
        self._by_generation = [self._pauses.labels(str(g)) for g in range(3)]

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = self._clock()
        elif phase == "stop" and self._started is not None:
            self._by_generation[info["generation"]].observe(self._clock() - self._started)
            self._started = None

    def install(self) -> None:
        if self not in gc.callbacks:
            gc.callbacks.append(self)

    def remove(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)
