"""Two CRs claiming one topic or group on one cluster: the oldest wins (Strimzi UTO).

Age is ``creationTimestamp``, ties broken by uid so that every replica of the operator
picks the same winner.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, order=True)
class Claim:
    created: str
    uid: str
    name: str


def winner(claims: Iterable[Claim]) -> Claim | None:
    return min(claims, default=None)


def conflict_message(kind: str, broker_name: str, owner: Claim) -> str:
    return f"{kind} {broker_name!r} on this cluster is already declared by {owner.name!r} (older)"
