"""Retry delays for unreachable brokers: exponential from 1 s, capped, never a hot loop."""

from __future__ import annotations

MAX_DELAY_S = 60.0


def delay_s(retry: int) -> float:
    return float(min(MAX_DELAY_S, 2 ** max(0, min(retry, 16))))
