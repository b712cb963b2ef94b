"""The leader's in-sync set (``popbroker.replication.insync``), with an injected clock."""

from __future__ import annotations

from popbroker.replication.insync import InSyncSet

LAG_MS = 10_000


class Clock:
    def __init__(self) -> None:
        self.ms = 0

    def __call__(self) -> int:
        return self.ms


def test_a_silent_member_leaves_and_acks_count_over_both_sets_until_the_lease_records_it() -> None:
    clock = Clock()
    isr = InSyncSet(leader="a", max_lag_ms=LAG_MS, clock_ms=clock, recorded=["b", "c"])
    for second in range(1, 30):
        clock.ms = second * 1_000
        isr.on_ack("b", second * 100, leader_end=second * 100)  # b keeps up; c is silent
        proposal = isr.proposal(commit=second * 100, epoch_start=0)
        if clock.ms <= LAG_MS:
            assert proposal == {"a", "b", "c"}
        else:
            assert proposal == {"a", "b"}
            break
    assert isr.counted(proposal) == {"a", "b", "c"}  # not recorded yet: c still counts
    isr.recorded_on_lease(proposal)
    assert isr.counted(None) == {"a", "b"}


def test_a_follower_joins_once_it_holds_the_commit_offset_and_the_epoch_start() -> None:
    clock = Clock()
    isr = InSyncSet(leader="a", max_lag_ms=LAG_MS, clock_ms=clock)
    isr.on_ack("d", 500, leader_end=900)  # behind
    assert isr.proposal(commit=600, epoch_start=0) == {"a"}
    clock.ms = 1_000
    isr.on_ack("d", 900, leader_end=900)  # caught up, but short of the epoch's start
    assert isr.proposal(commit=900, epoch_start=950) == {"a"}
    isr.on_ack("d", 1_000, leader_end=1_000)
    assert isr.proposal(commit=1_000, epoch_start=950) == {"a", "d"}
    clock.ms = 1_000 + LAG_MS + 1  # then silent: it leaves again once recorded
    isr.recorded_on_lease({"a", "d"})
    assert isr.proposal(commit=1_000, epoch_start=950) == {"a"}


def test_the_leader_never_leaves_its_own_set() -> None:
    clock = Clock()
    isr = InSyncSet(leader="a", max_lag_ms=LAG_MS, clock_ms=clock, recorded=[])
    clock.ms = 10 * LAG_MS
    assert isr.proposal(commit=0, epoch_start=0) == {"a"}
    isr.recorded_on_lease([])
    assert isr.recorded == {"a"}
