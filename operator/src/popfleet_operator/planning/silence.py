"""How long a broker has been silent, and whether a resync may wait before reporting it.

A resync tick of a converged Topic or ConsumerGroup that finds a broker not answering (a
retriable admin error: deadline, unavailable) does not flip the object to
``BrokerUnreachable`` at once. A broker busy for a moment (a long fsync, a GC pause, a
burst of admin calls) is slow, not gone, and flipping hundreds of converged objects to
``Ready=False`` for it sends operators and alerts chasing nothing. So:

1. every round's outcomes update, per (namespace, cluster, broker), since when the broker
   has not answered (any answer clears it);
2. a round of an object that is confirmed for its current generation (a resync tick, or an
   edit of its labels or annotations alone) *holds* (keeps its status as it is, writes
   nothing) while every silent broker has been silent for less than ``grace_s``; after
   that the round reports it like any other;
3. change rounds (a new generation) never hold: what they must confirm is not confirmed,
   and the status says so at once.

Pure: the caller passes the time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from popfleet_operator.model.observations import BrokerOutcome

Key = tuple[str, str, str]  # namespace, cluster, broker


@dataclass
class BrokerSilence:
    """Since when each broker has not answered (see the module docstring)."""

    grace_s: float
    _since: dict[Key, float] = field(default_factory=dict)

    def observe(
        self, namespace: str, cluster: str, outcomes: Sequence[BrokerOutcome], *, now_s: float
    ) -> None:
        """Step 1: an answer clears a broker's silence; a retriable failure starts it."""
        for outcome in outcomes:
            key = (namespace, cluster, outcome.broker)
            if outcome.reachable:
                self._since.pop(key, None)
            else:
                self._since.setdefault(key, now_s)

    def silent_for(self, namespace: str, cluster: str, broker: str, *, now_s: float) -> float:
        since = self._since.get((namespace, cluster, broker))
        return 0.0 if since is None else now_s - since

    def hold(
        self, namespace: str, cluster: str, outcomes: Sequence[BrokerOutcome], *, now_s: float
    ) -> bool:
        """Step 2: some broker is silent, and each silent one for less than the grace."""
        silent = [o.broker for o in outcomes if not o.reachable]
        return bool(silent) and all(
            self.silent_for(namespace, cluster, b, now_s=now_s) < self.grace_s for b in silent
        )
