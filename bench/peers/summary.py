"""Medians, ratios and run order of the peer benchmarks (pure functions).

A run's figures are nested dicts (``{"produce": {"msgs_per_s": ..., "cpu": {...}}}``);
a :data:`Metric` names a JSON key and the path to its value in one run. A metric a
run does not have (a phase one system does not run) is left out of its median,
and a median of nothing is None, as is a ratio with a None or zero side.

Ratios are ours / theirs of the medians: for throughput > 1 means popfleet is
faster; for latency, lateness and CPU per message > 1 means popfleet is slower
or costlier.

Callers: :mod:`bench.pop_peers`, :mod:`bench.pop_peers_loadgen`.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

Metric = tuple[str, tuple[str, ...]]


def lookup(run: Mapping[str, Any], path: Sequence[str]) -> float | None:
    """The number at ``path`` in one run's figures, None when absent or not a number."""
    value: Any = run
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def median_of(values: Sequence[float]) -> float | None:
    return float(statistics.median(values)) if values else None


def medians(
    runs: Sequence[Mapping[str, Any]], metrics: Sequence[Metric], *, digits: int = 3
) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for key, path in metrics:
        values = [v for v in (lookup(run, path) for run in runs) if v is not None]
        median = median_of(values)
        out[key] = None if median is None else round(median, digits)
    return out


def spreads(
    runs: Sequence[Mapping[str, Any]], metrics: Sequence[Metric]
) -> dict[str, list[float] | None]:
    """[min, max] over the runs per metric (None when no run has it)."""
    out: dict[str, list[float] | None] = {}
    for key, path in metrics:
        values = [v for v in (lookup(run, path) for run in runs) if v is not None]
        out[key] = [min(values), max(values)] if values else None
    return out


def ratio(ours: float | None, theirs: float | None, *, digits: int = 3) -> float | None:
    if ours is None or not theirs:
        return None
    return round(ours / theirs, digits)


def ratios(
    ours: Mapping[str, float | None], theirs: Mapping[str, float | None], keys: Sequence[str]
) -> dict[str, float | None]:
    return {key: ratio(ours.get(key), theirs.get(key)) for key in keys}


def rotation(systems: Sequence[str], run: int) -> list[str]:
    """The systems of run ``run`` (0-based): the list rotated left by ``run`` places."""
    if not systems:
        return []
    shift = run % len(systems)
    return [*systems[shift:], *systems[:shift]]
