"""The Lease decisions (``popbroker.replication.lease``), and a model of three candidates.

The model: a compare-and-swap register (the Lease; a write carries the version it read and
fails on a stale one), three candidates whose local clocks run at rates in [0.9, 1.1] of
real time from arbitrary offsets, reads and writes as separate steps (so they race), and
candidates that are frozen for a while (SIGSTOP, a VM pause) or cut off from the API. After
every step: at no real instant do two candidates both believe they hold the lease and may
serve. The same model with a renew deadline longer than the lease finds two servers.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    rule,
)

from popbroker.replication import lease
from popbroker.replication.lease import Record, Renew, TakeOver, Wait


def test_timing_rule() -> None:
    lease.check_timing(lease_ms=15_000, renew_deadline_ms=10_000, retry_ms=2_000)
    with pytest.raises(lease.LeaseTimingError, match="must exceed renew deadline"):
        lease.check_timing(lease_ms=10_000, renew_deadline_ms=10_000, retry_ms=2_000)
    with pytest.raises(lease.LeaseTimingError, match=r"1\.2 x retry"):
        lease.check_timing(lease_ms=15_000, renew_deadline_ms=2_400, retry_ms=2_000)


def test_decisions() -> None:
    held = Record("a", 7, "v1")
    assert lease.decide("a", held, unchanged_ms=99_999, lease_ms=15_000, eligible=True) == Renew(7)
    assert lease.decide("b", held, unchanged_ms=14_999, lease_ms=15_000, eligible=True) == Wait(
        "a holds term 7"
    )
    assert lease.decide("b", held, unchanged_ms=15_000, lease_ms=15_000, eligible=True) == (
        TakeOver(8)
    )
    assert isinstance(
        lease.decide("b", held, unchanged_ms=60_000, lease_ms=15_000, eligible=False), Wait
    )
    released = Record(None, 7, "v2")
    assert lease.decide("b", released, unchanged_ms=0, lease_ms=15_000, eligible=True) == (
        TakeOver(8)
    )


def test_a_handed_over_lease_goes_to_its_successor_first() -> None:
    handed = Record(None, 7, "v3", frozenset({"a", "b", "c"}), successor="b")
    decide = lease.decide
    assert decide("b", handed, unchanged_ms=0, lease_ms=15_000, eligible=True) == TakeOver(8)
    assert decide("c", handed, unchanged_ms=14_999, lease_ms=15_000, eligible=True) == Wait(
        "term 7 was handed over to b"
    )
    assert decide("a", handed, unchanged_ms=0, lease_ms=15_000, eligible=True) == Wait(
        "term 7 was handed over to b"
    )
    # the successor never took it (gone as well): after the lease time any in-sync replica
    assert decide("c", handed, unchanged_ms=15_000, lease_ms=15_000, eligible=True) == (TakeOver(8))
    assert isinstance(decide("b", handed, unchanged_ms=0, lease_ms=15_000, eligible=False), Wait)


def test_the_observer_counts_from_the_last_change_it_saw() -> None:
    observer = lease.Observer()
    assert observer.observe(Record("a", 1, "v1"), 1_000) == 0
    assert observer.observe(Record("a", 1, "v1"), 4_000) == 3_000
    assert observer.observe(Record("a", 1, "v2"), 5_000) == 0  # a renewal: a new version


def test_may_serve() -> None:
    assert lease.may_serve(last_renewed_ms=1_000, now_ms=10_999, renew_deadline_ms=10_000)
    assert not lease.may_serve(last_renewed_ms=1_000, now_ms=11_000, renew_deadline_ms=10_000)
    assert not lease.may_serve(last_renewed_ms=None, now_ms=0, renew_deadline_ms=10_000)


NAMES = ("a", "b", "c")


class Candidates(RuleBasedStateMachine):
    LEASE_MS = 15_000
    RENEW_DEADLINE_MS = 10_000

    def __init__(self) -> None:
        super().__init__()
        self.now = 0  # real time, ms
        self.record = Record(None, 0, "0")
        self.versions = 0
        self.rates = dict.fromkeys(NAMES, 1.0)
        self.offsets = dict.fromkeys(NAMES, 0)
        self.observers = {n: lease.Observer() for n in NAMES}
        self.read: dict[str, tuple[Record, int]] = {}  # what each read, and its unchanged ms
        self.renewed: dict[str, int | None] = dict.fromkeys(NAMES)  # local ms of last win
        self.believes: dict[str, bool] = dict.fromkeys(NAMES, False)
        self.frozen_until = dict.fromkeys(NAMES, 0)
        self.started = False  # clocks are set before anything reads them

    def local(self, name: str) -> int:
        return self.offsets[name] + int(self.rates[name] * self.now)

    @rule(
        name=st.sampled_from(NAMES),
        rate=st.floats(0.9, 1.1),
        offset=st.integers(-(10**9), 10**9),
    )
    def set_clock(self, name: str, rate: float, offset: int) -> None:
        """Only before anything happened: clocks keep their rate and offset afterwards."""
        if not self.started:
            self.rates[name], self.offsets[name] = rate, offset

    @rule(dt=st.integers(1, 6_000))
    def tick(self, dt: int) -> None:
        self.started = True
        self.now += dt

    @rule(name=st.sampled_from(NAMES), for_ms=st.integers(1, 40_000))
    def freeze(self, name: str, for_ms: int) -> None:
        self.frozen_until[name] = max(self.frozen_until[name], self.now + for_ms)

    def _awake(self, name: str) -> bool:
        return self.now >= self.frozen_until[name]

    @rule(name=st.sampled_from(NAMES))
    def read_lease(self, name: str) -> None:
        self.started = True
        if self._awake(name):
            unchanged = self.observers[name].observe(self.record, self.local(name))
            self.read[name] = (self.record, unchanged)

    @rule(name=st.sampled_from(NAMES))
    def write_lease(self, name: str) -> None:
        """Decide on what was read, then compare-and-swap; the local time is taken before
        the write goes out (a renewal counts from when it was sent)."""
        if not self._awake(name) or name not in self.read:
            return
        record, unchanged = self.read.pop(name)
        decision = lease.decide(
            name, record, unchanged_ms=unchanged, lease_ms=self.LEASE_MS, eligible=True
        )
        if isinstance(decision, Wait):
            if record.holder != name:
                self.believes[name] = False
            return
        sent_at = self.local(name)
        if record.version != self.record.version:  # 409: someone moved first
            self.believes[name] = False
            return
        self.versions += 1
        self.record = Record(name, decision.term, str(self.versions))
        self.renewed[name], self.believes[name] = sent_at, True

    @invariant()
    def at_most_one_serves(self) -> None:
        self.check_at_most_one_serves()

    def check_at_most_one_serves(self) -> None:
        serving = [
            n
            for n in NAMES
            if self.believes[n]
            and self._awake(n)
            and lease.may_serve(
                last_renewed_ms=self.renewed[n],
                now_ms=self.local(n),
                renew_deadline_ms=self.RENEW_DEADLINE_MS,
            )
        ]
        assert len(serving) <= 1, (serving, self.now, self.record)


TestCandidates = Candidates.TestCase
TestCandidates.settings = settings(max_examples=400, stateful_step_count=80, deadline=None)


class UnsafeCandidates(Candidates):
    RENEW_DEADLINE_MS = 20_000  # longer than the lease: a deposed holder keeps serving


def _takeover_while_the_holder_serves(machine: Candidates) -> None:
    """a takes the Lease at 0; b watches it unchanged for the lease time by its own clock and
    takes it over at 15 s; a last renewed at 0, and checks after every step."""
    steps: list[Callable[[], None]] = [
        lambda: machine.read_lease("a"),
        lambda: machine.write_lease("a"),
        lambda: machine.read_lease("b"),
        lambda: machine.tick(6_000),
        lambda: machine.tick(6_000),
        lambda: machine.tick(3_000),
        lambda: machine.read_lease("b"),
        lambda: machine.write_lease("b"),
    ]
    for step in steps:
        step()
        machine.check_at_most_one_serves()


def test_the_model_finds_two_servers_when_the_deadline_outlasts_the_lease() -> None:
    """The model's check is not vacuous: with a renew deadline longer than the lease, a
    takeover at the lease time leaves the deposed holder serving. (A fixed counterexample:
    a random search for it missed it in CI, twice, even derandomized.)"""
    _takeover_while_the_holder_serves(Candidates())  # deadline 10 s: a stopped serving at 10 s
    unsafe = UnsafeCandidates()
    with pytest.raises(AssertionError, match=r"\['a', 'b'\]"):
        _takeover_while_the_holder_serves(unsafe)
    assert unsafe.record.holder == "b" and unsafe.record.term == 2
