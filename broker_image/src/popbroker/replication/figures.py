"""What a replica reports about itself (issue 18): the store role's ``/metrics`` reads it
on each scrape (``popbroker.metrics.replication``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ReplicationFigures:
    """One replica's replication, as it stands."""

    term: int  # the highest leadership term this replica has seen
    leading: bool
    in_sync: tuple[str, ...] = ()  # the recorded in-sync set, the leader included (a leader's)
    lag_bytes: Mapping[str, int] = field(default_factory=dict)  # a leader's, per follower
    lag_ms: Mapping[str, int] = field(default_factory=dict)  # since each last caught up
    term_changes: int = 0  # terms this replica has seen begin since it started
    fenced_writes: int = 0  # writes it refused because it did not lead
    hand_overs: int = 0  # planned hand-overs it did as leader (``Replica.hand_over``)
