"""The pure rules of a replicated broker set: epochs, truncation, commit point, in-sync set.

No I/O, no clock of its own, no store: the replicator, the leader's write path and the
lease holder call these with what they observed, and the property tests drive them through
every interleaving of appends, acks, crashes and term changes. The anchors (RocketMQ 5
controller mode, Kafka's leader epochs and ISR) are in ``shared/reference/replication-anchors.md``;
the design is ``docs/design/2026-11-28-replication.md`` (draft).

Offsets are commit-log physical offsets: a replica's log is the leader's byte for byte up
to where they diverge, so one number names the same record on every replica.

1. **Epochs.** A term's leader appends ``(epoch, start offset)`` to its history before it
   accepts a write; epochs strictly grow, start offsets never shrink
   (:meth:`EpochHistory.with_entry`). An entry's records run to the next entry's start, the
   last one's to the log end.
2. **Truncation.** Before it follows a new leader, a replica cuts its log at
   :func:`divergence_point`: walking its own epochs from the newest, the first that the
   leader has with the same start offset fixes the point at the smaller of the two ends of
   that epoch. No common entry (and a non-empty log) means no point: the replica refuses
   to follow rather than guess. A replica with an empty log starts at 0.
3. **In-sync set and commit.** A write is accepted only while the in-sync set (the leader
   included) has at least ``min_in_sync`` members (:func:`may_accept_writes`), checked
   before the append, so a refusal is never ambiguous. A SYNC write is acknowledged once
   :func:`commit_offset`, the lowest end acknowledged by every member of the set, passes
   it. While a change of the set is in flight, acks are counted over the union of the old
   and the new set (:func:`counted_members`).
4. **Membership.** A follower leaves the set when it has not caught up for ``max_lag_ms``
   (:func:`lagging`); it may join when it has acknowledged the commit offset and the start
   of the current epoch (:func:`may_join`). Only members may lead the next term, and any of
   them may: the first to take the Lease (``lease.Record.may_lead``); every member holds
   every acknowledged write, which the property test checks for any choice.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass


class ReplicationRuleError(ValueError):
    """A step that the rules forbid (a stale epoch, a shrinking start offset)."""


@dataclass(frozen=True, slots=True, order=True)
class EpochEntry:
    epoch: int
    start_offset: int


@dataclass(frozen=True, slots=True)
class EpochHistory:
    """A replica's epoch history, oldest first (rule 1)."""

    entries: tuple[EpochEntry, ...] = ()

    @property
    def last_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else -1

    def with_entry(self, epoch: int, start_offset: int) -> EpochHistory:
        """The history with a new term starting at ``start_offset``."""
        if self.entries:
            last = self.entries[-1]
            if epoch <= last.epoch:
                raise ReplicationRuleError(f"epoch {epoch} is not after {last.epoch}")
            if start_offset < last.start_offset:
                raise ReplicationRuleError(
                    f"epoch {epoch} starts at {start_offset}, before epoch {last.epoch} "
                    f"({last.start_offset})"
                )
        return EpochHistory((*self.entries, EpochEntry(epoch, start_offset)))

    def entry(self, epoch: int) -> EpochEntry | None:
        for found in self.entries:
            if found.epoch == epoch:
                return found
        return None

    def end_of(self, entry: EpochEntry, log_end: int) -> int:
        """Where ``entry``'s records end: the next entry's start, or the log end."""
        at = self.entries.index(entry)
        if at + 1 < len(self.entries):
            return self.entries[at + 1].start_offset
        return log_end

    def truncated(self, offset: int) -> EpochHistory:
        """The history of a log cut at ``offset``: epochs that start at or after it go
        (they hold no record any more); the epoch the cut falls in stays."""
        kept = tuple(e for e in self.entries if e.start_offset < offset)
        return EpochHistory(kept)


def divergence_point(
    leader: EpochHistory, follower: EpochHistory, *, leader_end: int, follower_end: int
) -> int | None:
    """Where the follower cuts its log before following ``leader`` (rule 2); None when
    their histories have nothing in common and the follower's log is not empty."""
    if follower_end == 0:
        return 0
    for mine in reversed(follower.entries):
        theirs = leader.entry(mine.epoch)
        if theirs is not None and theirs.start_offset == mine.start_offset:
            return min(follower.end_of(mine, follower_end), leader.end_of(theirs, leader_end))
    return None


def may_accept_writes(in_sync: Collection[str], min_in_sync: int) -> bool:
    """Rule 3: enough members to take a write at all (checked before the append)."""
    return len(in_sync) >= min_in_sync


def counted_members(current: Collection[str], proposed: Collection[str] | None) -> frozenset[str]:
    """The members whose acks count: the set, or the union while a change is in flight."""
    return frozenset(current) | frozenset(proposed or ())


def commit_offset(
    leader: str, *, leader_end: int, acked: Mapping[str, int], members: Collection[str]
) -> int:
    """The lowest end every member has acknowledged (the leader's is its log end); a member
    that never acknowledged holds it at 0."""
    ends = [leader_end if m == leader else acked.get(m, 0) for m in members]
    return min(ends, default=leader_end)


def lagging(
    caught_up_ms: Mapping[str, int],
    *,
    members: Collection[str],
    leader: str,
    now_ms: int,
    max_lag_ms: int,
) -> frozenset[str]:
    """Followers in the set that have not caught up within ``max_lag_ms`` (rule 4)."""
    return frozenset(
        m for m in members if m != leader and now_ms - caught_up_ms.get(m, -(2**62)) > max_lag_ms
    )


def may_join(acked: int, commit: int, epoch_start: int) -> bool:
    """A follower may join the set once it holds the commit offset and the current term."""
    return acked >= commit and acked >= epoch_start
