"""How many replicas to apply, and when scale-down must wait.

Scale-down, as numbered steps (the handler does 1-2 through the admin API):

1. The leaving brokers are the ordinals ``desired .. current-1``.
2. For each, sum the backlog (lag plus in-flight messages) of every group it holds;
   an unreachable broker's backlog is unknown.
3. If every leaving broker reports 0, apply ``desired``; otherwise keep ``current`` and
   say which broker holds how much (a condition), so nothing is dropped with its volume.

Scale-up is always allowed; new brokers get every declared topic, group and mode from the
Topic/ConsumerGroup reconcilers (read-back finds them missing), not from copied files.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ScalePlan:
    replicas: int
    blocked: str = ""  # why scale-down waits; "" when it does not


def leaving(current: int, desired: int) -> range:
    return range(desired, current)


def plan(*, current: int | None, desired: int, backlog: Mapping[int, int | None]) -> ScalePlan:
    """``backlog``: leaving ordinal -> messages still to consume (None = could not tell)."""
    if current is None or desired >= current:
        return ScalePlan(desired)
    reasons = []
    for ordinal in leaving(current, desired):
        messages = backlog.get(ordinal)
        if messages is None:
            reasons.append(f"broker {ordinal}: backlog unknown (unreachable)")
        elif messages > 0:
            reasons.append(f"broker {ordinal}: {messages} messages not yet consumed")
    if reasons:
        return ScalePlan(current, "scale-down waits: " + "; ".join(reasons))
    return ScalePlan(desired)
