"""The replicated kind steps' own logic: the Lease history check and the partition's policies."""

from __future__ import annotations

import pytest

from popfleet_e2e import replicated
from popfleet_e2e.traffic import Tally


def test_one_holder_per_term_with_hand_overs_passes() -> None:
    seen = [(1, "a"), (1, "a"), (1, None), (2, "b"), (2, "b"), (3, "c")]
    assert replicated.lease_problems(seen) == []


def test_two_holders_of_one_term_and_a_term_going_back_are_reported() -> None:
    assert replicated.lease_problems([(1, "a"), (2, "b"), (2, "c")]) == [
        "term 2 held by b and by c"
    ]
    assert replicated.lease_problems([(1, "a"), (3, "b"), (2, "b")]) == [
        "term 2 written after term 3"
    ]


def test_the_partition_cuts_the_leaders_egress_and_the_followers_way_to_it() -> None:
    isolate, cut_off = replicated.isolation_policies("rep-0", ["rep-r2-0", "rep-r1-0"], "10.1.2.3")
    assert isolate["spec"] == {
        "podSelector": {"matchLabels": {"statefulset.kubernetes.io/pod-name": "rep-0"}},
        "policyTypes": ["Egress"],
        "egress": [],  # nothing: neither the API server nor a follower
    }
    selector = cut_off["spec"]["podSelector"]["matchExpressions"][0]
    assert selector["values"] == ["rep-r1-0", "rep-r2-0"]
    assert cut_off["spec"]["policyTypes"] == ["Egress"]  # ingress as the cluster has it
    (rule,) = cut_off["spec"]["egress"]
    assert rule["to"] == [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.1.2.3/32"]}}]


def test_the_longest_pause_is_the_one_that_ends_after_the_disruption() -> None:
    tally = Tally()
    tally.ack_times = [10.0, 10.1, 10.2, 14.0, 14.1, 20.0, 20.1]
    # 14.1 -> 20.0 is the longest pause ending after 12.0; it ends 8.0 s after it
    assert tally.longest_pause(after=12.0) == pytest.approx((5.9, 8.0))
    assert tally.longest_pause(after=10.15) == pytest.approx((5.9, 9.85))
    assert tally.longest_pause(after=30.0) is None
