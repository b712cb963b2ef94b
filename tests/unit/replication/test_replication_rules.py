"""The replication rules (``popbroker.replication.rules``), one by one and as a whole.

The whole: a model broker set of three replicas whose logs are lists of ``(epoch, value)``
records (one record per offset, for clarity), driven by hypothesis through any interleaving
of writes, replication, acks, membership changes, crashes, restarts, isolated old leaders
writing on their own, and elections. The only decisions the model takes are the rules'.
After every step: every record acknowledged to a SYNC producer is in the current leader's
log at its offset, and every live member of the in-sync set that follows the leader holds
every acknowledged record.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from popbroker.replication import rules
from popbroker.replication.rules import EpochEntry, EpochHistory

# ------------------------------------------------------------------------- one by one


def test_epochs_must_grow_and_start_offsets_must_not_shrink() -> None:
    history = EpochHistory().with_entry(1, 0).with_entry(2, 100)
    assert history.last_epoch == 2
    with pytest.raises(rules.ReplicationRuleError, match="not after"):
        history.with_entry(2, 200)
    with pytest.raises(rules.ReplicationRuleError, match="before epoch 2"):
        history.with_entry(3, 50)
    assert history.with_entry(3, 100).entries[-1] == EpochEntry(3, 100)  # an empty term


def test_end_of_an_epoch_and_truncation() -> None:
    history = EpochHistory().with_entry(1, 0).with_entry(3, 100).with_entry(5, 250)
    assert [history.end_of(e, 400) for e in history.entries] == [100, 250, 400]
    assert history.truncated(250).entries == (EpochEntry(1, 0), EpochEntry(3, 100))
    assert history.truncated(251).entries == history.entries
    assert history.truncated(0).entries == ()


def test_divergence_point_cases() -> None:
    leader = EpochHistory().with_entry(1, 0).with_entry(2, 100).with_entry(4, 180)
    # the follower saw epoch 3 (a leader that lost its term) from 150: cut where 2 ends
    diverged = EpochHistory().with_entry(1, 0).with_entry(2, 100).with_entry(3, 150)
    assert rules.divergence_point(leader, diverged, leader_end=300, follower_end=170) == 150
    # behind in the leader's current epoch: nothing to cut
    behind = EpochHistory().with_entry(1, 0).with_entry(2, 100).with_entry(4, 180)
    assert rules.divergence_point(leader, behind, leader_end=300, follower_end=200) == 200
    # ahead of a leader that holds less of the same epoch: cut to the leader's end
    ahead = EpochHistory().with_entry(1, 0).with_entry(2, 100)
    assert rules.divergence_point(leader, ahead, leader_end=300, follower_end=170) == 170
    assert rules.divergence_point(leader, ahead, leader_end=300, follower_end=120) == 120
    # the same epoch number with another start: not a common point
    other = EpochHistory().with_entry(2, 50)
    assert rules.divergence_point(leader, other, leader_end=300, follower_end=90) is None
    assert rules.divergence_point(leader, EpochHistory(), leader_end=300, follower_end=0) == 0


def test_commit_offset_is_the_lowest_ack_of_the_counted_members() -> None:
    acked = {"b": 120, "c": 90}
    assert rules.commit_offset("a", leader_end=150, acked=acked, members={"a", "b"}) == 120
    assert rules.commit_offset("a", leader_end=150, acked=acked, members={"a", "b", "c"}) == 90
    # a member that never acknowledged holds it at 0
    assert rules.commit_offset("a", leader_end=150, acked={}, members={"a", "d"}) == 0
    assert rules.counted_members({"a", "b"}, {"a", "c"}) == {"a", "b", "c"}
    assert rules.counted_members({"a", "b"}, None) == {"a", "b"}


def test_membership_and_election() -> None:
    assert rules.may_accept_writes({"a", "b"}, 2) and not rules.may_accept_writes({"a"}, 2)
    caught = {"b": 1_000, "c": 9_000}
    assert rules.lagging(
        caught, members={"a", "b", "c"}, leader="a", now_ms=10_000, max_lag_ms=5_000
    ) == {"b"}
    assert rules.lagging({}, members={"a", "d"}, leader="a", now_ms=10, max_lag_ms=5_000) == {"d"}
    assert rules.may_join(acked=200, commit=150, epoch_start=180)
    assert not rules.may_join(acked=170, commit=150, epoch_start=180)


# ------------------------------------------------------------------------- as a whole

REPLICAS = ("r0", "r1", "r2")
MIN_IN_SYNC = 2


class BrokerSet(RuleBasedStateMachine):
    """Three replicas; SYNC writes with ``min_in_sync`` 2 (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.logs: dict[str, list[tuple[int, int]]] = {r: [] for r in REPLICAS}
        self.histories = {r: EpochHistory().with_entry(0, 0) for r in REPLICAS}
        self.alive = set(REPLICAS)
        self.term = 0
        self.leader: str | None = "r0"
        self.following: set[str] = {"r1", "r2"}  # truncated to the current leader
        self.in_sync: frozenset[str] = frozenset(REPLICAS)  # the coordinator's record
        self.acked: dict[str, int] = {}  # follower -> end it acknowledged (this term)
        self.pending: dict[int, int] = {}  # offset -> value: written, not yet acknowledged
        self.acknowledged: dict[int, int] = {}  # offset -> value: told OK to the producer
        self.next_value = 0

    # -- the leader's write path ----------------------------------------------------------

    @precondition(lambda self: self.leader is not None)
    @rule()
    def write(self) -> None:
        assert self.leader is not None
        if not rules.may_accept_writes(self.in_sync, MIN_IN_SYNC):
            return  # refused before the append: nothing ambiguous
        self.next_value += 1
        self.logs[self.leader].append((self.term, self.next_value))
        self.pending[len(self.logs[self.leader]) - 1] = self.next_value

    @precondition(lambda self: self.leader is not None)
    @rule(follower=st.sampled_from(REPLICAS), count=st.integers(1, 3))
    def replicate(self, follower: str, count: int) -> None:
        """Contiguous frames from the leader; the follower acknowledges its end."""
        leader = self.leader
        assert leader is not None
        if follower == leader or follower not in self.alive or follower not in self.following:
            return
        source, target = self.logs[leader], self.logs[follower]
        for _ in range(count):
            if len(target) >= len(source):
                break
            record = source[len(target)]
            if record[0] > self.histories[follower].last_epoch:
                start = len(target)
                self.histories[follower] = self.histories[follower].with_entry(record[0], start)
            target.append(record)
        self.acked[follower] = len(target)

    @precondition(lambda self: self.leader is not None)
    @rule()
    def acknowledge(self) -> None:
        """SYNC: the writes below the commit offset are acknowledged to the producers."""
        leader = self.leader
        assert leader is not None
        commit = rules.commit_offset(
            leader, leader_end=len(self.logs[leader]), acked=self.acked, members=self.in_sync
        )
        for offset in sorted(self.pending):
            if offset < commit:
                self.acknowledged[offset] = self.pending.pop(offset)

    # -- the set's membership (the leader proposes, the coordinator records) ----------------

    @precondition(lambda self: self.leader is not None)
    @rule(follower=st.sampled_from(REPLICAS))
    def shrink(self, follower: str) -> None:
        """The leader drops a follower it judged lagging; no rule forbids a wrong judgement."""
        if follower != self.leader and follower in self.in_sync:
            self.in_sync = self.in_sync - {follower}

    @precondition(lambda self: self.leader is not None)
    @rule(follower=st.sampled_from(REPLICAS))
    def expand(self, follower: str) -> None:
        leader = self.leader
        assert leader is not None
        if follower == leader or follower in self.in_sync or follower not in self.following:
            return
        commit = rules.commit_offset(
            leader, leader_end=len(self.logs[leader]), acked=self.acked, members=self.in_sync
        )
        start = self.histories[leader].entries[-1].start_offset
        if follower in self.alive and rules.may_join(self.acked.get(follower, 0), commit, start):
            self.in_sync = self.in_sync | {follower}

    # -- faults -----------------------------------------------------------------------------

    @rule(replica=st.sampled_from(REPLICAS))
    def crash(self, replica: str) -> None:
        """kill -9: the log survives (SYNC flush); a crashed leader leaves the set leaderless."""
        self.alive.discard(replica)
        self.following.discard(replica)
        if replica == self.leader:
            self.leader = None

    @rule(replica=st.sampled_from(REPLICAS))
    def restart(self, replica: str) -> None:
        if replica not in self.alive:
            self.alive.add(replica)
            self._follow(replica)

    @precondition(lambda self: self.leader is not None)
    @rule()
    def isolate_leader(self) -> None:
        """The leader is cut off: it loses its term and keeps writing on its own (no fencing
        by timing). Nobody follows it, so none of those writes is ever acknowledged."""
        old = self.leader
        assert old is not None
        self.leader = None
        self.logs[old].append((self.term, -1))
        self.logs[old].append((self.term, -2))

    @precondition(lambda self: self.leader is None)
    @rule(pick=st.sampled_from(REPLICAS))
    def elect(self, pick: str) -> None:
        """The next term: whichever live member of the in-sync set takes the Lease first
        (``lease.Record.may_lead``): any of them, not a best one, must be safe."""
        if pick not in self.alive or pick not in self.in_sync:
            return
        chosen = pick
        self.term += 1
        self.leader = chosen
        self.histories[chosen] = self.histories[chosen].with_entry(
            self.term, len(self.logs[chosen])
        )
        self.acked = {}
        self.following = set()
        # Unacknowledged writes of earlier terms: outcome unknown to their producers (they
        # may survive or not); they are no longer waited for.
        self.pending = {}
        for replica in self.alive - {chosen}:
            self._follow(replica)

    def _follow(self, replica: str) -> None:
        leader = self.leader
        if leader is None or replica == leader:
            return
        point = rules.divergence_point(
            self.histories[leader],
            self.histories[replica],
            leader_end=len(self.logs[leader]),
            follower_end=len(self.logs[replica]),
        )
        assert point is not None, (replica, self.histories, self.logs)
        del self.logs[replica][point:]
        self.histories[replica] = self.histories[replica].truncated(point)
        if not self.histories[replica].entries:
            self.histories[replica] = EpochHistory().with_entry(0, 0)
        self.following.add(replica)
        self.acked[replica] = len(self.logs[replica])

    # -- what must always hold -----------------------------------------------------------

    @invariant()
    def acknowledged_writes_are_on_the_leader(self) -> None:
        if self.leader is None:
            return
        log = self.logs[self.leader]
        for offset, value in self.acknowledged.items():
            assert offset < len(log) and log[offset][1] == value, (offset, value, self.leader)

    @invariant()
    def in_sync_followers_hold_them_once_caught_up(self) -> None:
        leader = self.leader
        if leader is None:
            return
        for member in self.in_sync & self.alive & self.following:
            log = self.logs[member]
            for offset, value in self.acknowledged.items():
                if offset < len(log):
                    assert log[offset][1] == value, (member, offset, value)

    @invariant()
    def logs_agree_below_the_commit_offset(self) -> None:
        leader = self.leader
        if leader is None:
            return
        commit = rules.commit_offset(
            leader, leader_end=len(self.logs[leader]), acked=self.acked, members=self.in_sync
        )
        for member in self.in_sync & self.following:
            assert self.logs[member][:commit] == self.logs[leader][:commit], member


TestBrokerSet = BrokerSet.TestCase
TestBrokerSet.settings = settings(max_examples=300, stateful_step_count=60, deadline=None)


@given(st.lists(st.integers(0, 5), min_size=1, max_size=6, unique=True).map(sorted))
def test_truncated_history_never_keeps_an_epoch_past_the_cut(epochs: list[int]) -> None:
    history = EpochHistory()
    for i, epoch in enumerate(epochs):
        history = history.with_entry(epoch, i * 10)
    for cut in range(0, len(epochs) * 10 + 1, 5):
        kept = history.truncated(cut)
        assert all(e.start_offset < cut for e in kept.entries)
        assert len(kept.entries) == sum(1 for e in history.entries if e.start_offset < cut)
