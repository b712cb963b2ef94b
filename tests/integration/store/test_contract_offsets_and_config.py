"""Contract: committed offsets, topics, groups, consume modes and members (every StoreApi)."""

from __future__ import annotations

import pytest

from popbroker.store.api import (
    ClusterMember,
    CommittedOffset,
    ConsumeMode,
    ConsumeModeConfig,
    GroupConfig,
    MessageType,
    Permission,
    RetryPolicy,
    StoreApi,
    TopicConfig,
)
from popbroker.store.errors import InvalidArgument, InvalidName, UnknownGroup, UnknownTopic


async def test_committed_offsets_round_trip_and_delete(store: StoreApi) -> None:
    assert await store.committed_offset(group="g1", topic="orders", queue_id=0) is None
    await store.commit_offset(group="g1", topic="orders", queue_id=0, queue_offset=5)
    await store.commit_offset(group="g1", topic="orders", queue_id=1, queue_offset=7)
    await store.commit_offset(group="g2", topic="orders", queue_id=0, queue_offset=1)
    assert await store.committed_offset(group="g1", topic="orders", queue_id=0) == 5
    await store.commit_offset(
        group="g1", topic="orders", queue_id=0, queue_offset=3
    )  # resets may move it back
    assert await store.committed_offset(group="g1", topic="orders", queue_id=0) == 3
    assert await store.committed_offsets("g1") == [
        CommittedOffset("g1", "orders", 0, 3),
        CommittedOffset("g1", "orders", 1, 7),
    ]
    assert len(await store.committed_offsets()) == 3
    await store.delete_offsets("g1")
    assert await store.committed_offsets("g1") == []
    with pytest.raises(InvalidArgument):
        await store.commit_offset(group="g1", topic="orders", queue_id=0, queue_offset=-1)


async def test_topic_config_round_trips(store: StoreApi) -> None:
    topic = TopicConfig("fifo-t", 2, 3, perm=Permission.READ, message_type=MessageType.FIFO)
    assert await store.put_topic(topic) == topic
    assert topic in await store.topics()
    await store.delete_topic("fifo-t")
    assert topic not in await store.topics()
    with pytest.raises(UnknownTopic):
        await store.delete_topic("fifo-t")


@pytest.mark.parametrize(
    "topic",
    [
        TopicConfig("bad name", 1, 1),
        TopicConfig("t", 0, 0),
        TopicConfig("t", -1, 4),
        TopicConfig("t", 4, 5000),
        TopicConfig("%RETRY%g+t", 1, 1),
    ],
)
async def test_bad_topics_are_refused(store: StoreApi, topic: TopicConfig) -> None:
    before = await store.topics()
    with pytest.raises(InvalidArgument):
        await store.put_topic(topic)
    assert await store.topics() == before


async def test_system_topics_cannot_be_deleted(store: StoreApi) -> None:
    revive = next(t.name for t in await store.topics() if t.name.startswith("rmq_sys_"))
    with pytest.raises(InvalidArgument, match="system topic"):
        await store.delete_topic(revive)


async def test_groups_round_trip(store: StoreApi) -> None:
    group = GroupConfig(
        "g1",
        max_reconsume_times=3,
        fifo=True,
        retry_policy=RetryPolicy(kind="customized", customized_backoff_ms=(1000, 5000)),
    )
    assert await store.put_group(group) == group
    assert await store.groups() == [group]
    with pytest.raises(InvalidName):
        await store.put_group(GroupConfig("no spaces"))
    with pytest.raises(InvalidArgument):
        await store.put_group(GroupConfig("g2", max_reconsume_times=-1))
    await store.delete_group("g1")
    assert await store.groups() == []
    with pytest.raises(UnknownGroup, match="does not exist"):
        await store.delete_group("g1")


async def test_consume_modes_round_trip(store: StoreApi) -> None:
    pop = ConsumeModeConfig("g1", "orders", ConsumeMode.POP, pop_share_queue_num=1)
    assert await store.put_consume_mode(pop) == pop
    assert await store.consume_modes() == [pop]
    back = ConsumeModeConfig("g1", "orders", ConsumeMode.PULL)
    await store.put_consume_mode(back)
    assert await store.consume_modes() == [back]
    with pytest.raises(InvalidArgument):
        await store.put_consume_mode(ConsumeModeConfig("g1", "orders", ConsumeMode.POP, -1))


async def test_members_round_trip_and_validate(store: StoreApi) -> None:
    members = [
        ClusterMember("broker-1", "127.0.1.2:8081"),
        ClusterMember("broker-0", "127.0.1.1:8081"),
    ]
    await store.set_members(members)
    assert [m.broker_name for m in await store.members()] == ["broker-0", "broker-1"]
    for bad in (
        [ClusterMember("b", "nohost")],
        [ClusterMember("b", "h:0")],
        [ClusterMember("b", "h:1"), ClusterMember("b", "h:2")],
    ):
        with pytest.raises(InvalidArgument):
            await store.set_members(bad)
    assert len(await store.members()) == 2
