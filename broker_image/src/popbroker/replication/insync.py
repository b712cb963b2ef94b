"""The leader's view of its in-sync set (issue 18).

Pure: the leader feeds it its followers' acknowledgements with its own clock, and asks what
set to propose. Rule 4 of :mod:`popbroker.replication.rules` decides: a member that has not
caught up (acknowledged the leader's end as it was when the acknowledgement arrived) for
``max_lag_ms`` leaves; a follower that holds the commit offset and the start of the current
epoch joins. A proposal takes effect only once the Lease has recorded it
(:meth:`InSyncSet.recorded_on_lease`); until then the acknowledgements that count are the
union of the recorded and the proposed set (``rules.counted_members``), so a shrink is never
acted on before it is durable, and a write is never acknowledged by fewer copies than the
set the next leader will be chosen from.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from popbroker.replication import rules


class InSyncSet:
    """The in-sync set a leader proposes and the one the Lease records (module docstring)."""

    def __init__(
        self, *, leader: str, max_lag_ms: int, clock_ms: Callable[[], int],
        recorded: Collection[str] = (),
    ) -> None:  # fmt: skip
        self._leader = leader
        self._max_lag_ms = max_lag_ms
        self._clock_ms = clock_ms
        self.recorded = frozenset(recorded) | {leader}
        self.acked: dict[str, int] = {}
        self._caught_up_ms: dict[str, int] = {}
        now = clock_ms()
        for member in self.recorded:  # a new leader gives the recorded set a full lag period
            self._caught_up_ms[member] = now

    def on_ack(self, follower: str, acked_end: int, *, leader_end: int) -> None:
        """``follower`` acknowledged ``acked_end`` while the leader's log ended at
        ``leader_end``."""
        self.acked[follower] = max(self.acked.get(follower, 0), acked_end)
        if acked_end >= leader_end:
            self._caught_up_ms[follower] = self._clock_ms()

    def proposal(self, *, commit: int, epoch_start: int) -> frozenset[str]:
        """The set to record next: laggards out, followers that may join in."""
        now = self._clock_ms()
        out = rules.lagging(
            self._caught_up_ms, members=self.recorded, leader=self._leader, now_ms=now,
            max_lag_ms=self._max_lag_ms,
        )  # fmt: skip
        joining = {
            name
            for name, acked in self.acked.items()
            if name not in self.recorded
            and rules.may_join(acked, commit, epoch_start)
            and now - self._caught_up_ms.get(name, -(2**62)) <= self._max_lag_ms
        }
        return (self.recorded - out) | joining

    def counted(self, proposal: Collection[str] | None) -> frozenset[str]:
        """Whose acknowledgements a write waits for while ``proposal`` is not yet recorded."""
        return rules.counted_members(self.recorded, proposal)

    def lag_ms(self) -> dict[str, int]:
        """Per follower heard from: milliseconds since it last held the leader's end."""
        now = self._clock_ms()
        caught_up = self._caught_up_ms.items()
        return {name: max(0, now - at) for name, at in caught_up if name != self._leader}

    def recorded_on_lease(self, members: Collection[str]) -> None:
        """The Lease now records ``members`` (a renewal that wrote them succeeded)."""
        self.recorded = frozenset(members) | {self._leader}
