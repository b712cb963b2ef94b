"""Parsing: schema defaults repeated, and what the schema cannot catch refused readably."""

from __future__ import annotations

import pytest

from popfleet_api import models
from popfleet_operator.errors import InvalidSpec
from popfleet_operator.model import specs


def test_cluster_defaults() -> None:
    spec = specs.parse_cluster({})
    assert (spec.brokers, spec.read_queue_nums, spec.revive_queue_num) == (3, 8, 8)
    assert spec.flush_mode is models.FlushMode.ASYNC
    assert spec.admin_token is None


def test_bad_quantity_is_an_invalid_spec() -> None:
    with pytest.raises(InvalidSpec, match=r"spec.resources.store.requests.cpu: 'lots'"):
        specs.parse_cluster({"resources": {"store": {"requests": {"cpu": "lots"}}}})
    with pytest.raises(InvalidSpec, match=r"spec.resources.front.limits.memory: '1 GB'"):
        specs.parse_cluster({"resources": {"front": {"limits": {"memory": "1 GB"}}}})


def test_topic_names_and_reserved_prefixes() -> None:
    topic = specs.parse_topic("orders", {"clusterRef": {"name": "demo"}, "queues": 4})
    assert topic.admin_topic() == models.Topic("orders", read_queue_nums=4, write_queue_nums=4)
    assert not topic.delete_on_broker
    with pytest.raises(InvalidSpec, match="reserve"):
        specs.parse_topic("x", {"clusterRef": {"name": "demo"}, "topicName": "rmq_sys_x"})


def test_group_parses_mode_and_retry_policy() -> None:
    group = specs.parse_group(
        "billing",
        {
            "clusterRef": {"name": "demo"},
            "topics": [{"name": "orders"}, {"name": "refunds", "filterExpression": "a"}],
            "consumeMode": "POP",
            "popShareQueueNum": 2,
            "retryPolicy": {"type": "CUSTOMIZED", "customizedBackoffMs": [10, 20]},
            "deletionPolicy": "Delete",
        },
    )
    assert group.topics == ("orders", "refunds")
    assert group.consume_mode is models.ConsumeMode.POP
    assert group.pop_share_queue_num == 2
    assert group.retry_policy.customized_backoff_ms == (10, 20)
    assert group.delete_on_broker
    assert group.admin_group().name == "billing"
