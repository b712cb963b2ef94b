"""Planning: scale-down waits for backlog, oldest claim wins, members, back-off, writes."""

from __future__ import annotations

from popfleet_api import models
from popfleet_operator.model import specs
from popfleet_operator.model.observations import BrokerPod
from popfleet_operator.planning import backoff, brokerconfig, conflicts, membership, scaling


def test_scale_up_and_unchanged_are_always_allowed() -> None:
    assert scaling.plan(current=None, desired=3, backlog={}) == scaling.ScalePlan(3)
    assert scaling.plan(current=3, desired=4, backlog={}) == scaling.ScalePlan(4)
    assert scaling.plan(current=3, desired=3, backlog={}) == scaling.ScalePlan(3)


def test_scale_down_waits_for_every_leaving_broker() -> None:
    assert list(scaling.leaving(4, 2)) == [2, 3]
    blocked = scaling.plan(current=4, desired=2, backlog={2: 0, 3: 17})
    assert blocked.replicas == 4
    assert "broker 3: 17 messages" in blocked.blocked
    unknown = scaling.plan(current=4, desired=2, backlog={2: 0})
    assert unknown.replicas == 4
    assert "broker 3: backlog unknown" in unknown.blocked
    assert scaling.plan(current=4, desired=2, backlog={2: 0, 3: 0}) == scaling.ScalePlan(2)


def test_oldest_claim_wins_with_uid_tiebreak() -> None:
    old = conflicts.Claim("2026-01-01T00:00:00Z", "b", "first")
    new = conflicts.Claim("2026-02-01T00:00:00Z", "a", "second")
    same_time = conflicts.Claim("2026-01-01T00:00:00Z", "a", "twin")
    assert conflicts.winner([new, old]) == old
    assert conflicts.winner([old, same_time]) == same_time
    assert conflicts.winner([]) is None
    assert "'first'" in conflicts.conflict_message("Topic", "orders", old)


def test_members_are_pods_with_ips_below_the_replica_count() -> None:
    pods = [
        BrokerPod("demo-1", 1, "127.0.1.3", ready=True),
        BrokerPod("demo-0", 0, "127.0.1.2", ready=False),
        BrokerPod("demo-2", 2, None, ready=False),
        BrokerPod("demo-3", 3, "127.0.1.9", ready=True),
    ]
    members = membership.desired_members(pods, replicas=3)
    assert members == (
        models.Member("demo-0", "127.0.1.2:8081"),
        models.Member("demo-1", "127.0.1.3:8081"),
    )
    assert not membership.needs_push(list(reversed(members)), members)
    assert membership.needs_push(members[:1], members)


def test_backoff_grows_and_caps() -> None:
    assert [backoff.delay_s(r) for r in (0, 1, 2, 3)] == [1.0, 2.0, 4.0, 8.0]
    assert backoff.delay_s(100) == backoff.MAX_DELAY_S


def test_topic_writes_only_what_differs_and_never_shrinks() -> None:
    want = models.Topic("t", read_queue_nums=8, write_queue_nums=8)
    assert brokerconfig.topic_action(want, None) is brokerconfig.TopicAction.PUT
    assert brokerconfig.topic_action(want, want) is brokerconfig.TopicAction.NONE
    fewer = models.Topic("t", read_queue_nums=4, write_queue_nums=4)
    assert brokerconfig.topic_action(want, fewer) is brokerconfig.TopicAction.PUT
    more = models.Topic("t", read_queue_nums=16, write_queue_nums=16)
    assert brokerconfig.topic_action(want, more) is brokerconfig.TopicAction.CANNOT_SHRINK


def test_mode_matches_only_when_explicitly_set() -> None:
    group = specs.parse_group("g", {"clusterRef": {"name": "c"}, "topics": [{"name": "t"}]})
    default = models.ConsumeModeSetting("g", "t", models.ConsumeMode.PULL, 0, explicitly_set=False)
    assert not brokerconfig.mode_matches(group, default)
    explicit = models.ConsumeModeSetting("g", "t", models.ConsumeMode.PULL, 0)
    assert brokerconfig.mode_matches(group, explicit)
    assert not brokerconfig.mode_matches(group, None)
