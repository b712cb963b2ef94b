"""Each fanned-out kind's ``Declared``: its ``status.brokers`` entry and its claim index key."""

from __future__ import annotations

from typing import Any, cast

import kopf

from popfleet_operator.handlers import fanning, groups, topics
from popfleet_operator.model.observations import BrokerOutcome, GroupOutcome, TopicOutcome
from popfleet_operator.status import fanout as fanout_status


def test_a_topic_entry_carries_queues_and_perm_only_when_the_broker_answered() -> None:
    answered = TopicOutcome("demo-0", synced=True, config_epoch="e", queues=8, perm="RW")
    silent = BrokerOutcome("demo-1", synced=False, reachable=False, error="UNAVAILABLE")
    assert topics.TOPICS.entry(answered) == {
        "name": "demo-0",
        "synced": True,
        "lastError": "",
        "configEpoch": "e",
        "queues": 8,
        "perm": "RW",
    }
    assert topics.TOPICS.entry(silent) == {
        "name": "demo-1",
        "synced": False,
        "lastError": "UNAVAILABLE",
    }


def test_a_group_entry_carries_the_mode_read_back() -> None:
    answered = GroupOutcome("demo-0", synced=True, mode="POP", pop_share_queue_num=0)
    assert groups.GROUPS.entry(answered) == {
        "name": "demo-0",
        "synced": True,
        "lastError": "",
        "mode": "POP",
        "popShareQueueNum": 0,
    }
    assert "mode" not in groups.GROUPS.entry(BrokerOutcome("demo-1", synced=False))


def test_a_broker_filled_in_from_the_last_status_keeps_its_kind() -> None:
    outcomes = [TopicOutcome("demo-0", synced=True, queues=4)]
    previous = [{"name": "demo-0", "configEpoch": "a"}, {"name": "demo-1", "configEpoch": "b"}]
    filled = fanout_status.with_missing(outcomes, ("demo-0", "demo-1"), previous)
    assert filled == [
        TopicOutcome("demo-0", synced=True, config_epoch="a", queues=4),
        BrokerOutcome("demo-1", synced=False, config_epoch="b"),
    ]


def test_the_claim_key_uses_the_broker_side_name_or_the_cr_name() -> None:
    meta: dict[str, Any] = {"name": "orders", "uid": "u1", "creationTimestamp": "t"}
    raw: dict[str, Any] = {"metadata": meta, "spec": {"clusterRef": {"name": "demo"}}}
    body = kopf.Body(cast(kopf.RawBody, raw))
    found = fanning.claims(
        topics.TOPICS, namespace="ns", name="orders", spec=body.spec, meta=body.meta
    )
    assert found == {("ns", "demo", "orders"): fanning.claim_of(body.meta)}
    raw = {"metadata": meta, "spec": {"clusterRef": {"name": "demo"}, "groupName": "GID_billing"}}
    named = kopf.Body(cast(kopf.RawBody, raw))
    keys = fanning.claims(groups.GROUPS, namespace=None, name="b", spec=named.spec, meta=named.meta)
    assert list(keys) == [("", "demo", "GID_billing")]
