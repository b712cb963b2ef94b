"""Topics, groups and consume modes through the admin API: create, update, read back, delete."""

from __future__ import annotations

import pytest

from popfleet_api import errors
from popfleet_api.client import BrokerAdmin
from popfleet_api.models import (
    ConsumeMode,
    ConsumeModeSetting,
    Group,
    MessageType,
    Permission,
    RetryKind,
    RetryPolicy,
    Topic,
)
from tests.integration.admin.conftest import CLUSTER, REVIVE_QUEUES, Broker


async def test_topic_create_update_list_delete(admin: BrokerAdmin) -> None:
    created = await admin.put_topic(Topic("orders", 4, 4, message_type=MessageType.FIFO))
    assert created.created
    assert created.topic == Topic("orders", 4, 4, Permission.READ_WRITE, MessageType.FIFO)

    updated = await admin.put_topic(Topic("orders", 8, 6, perm=Permission.READ))
    assert not updated.created
    assert updated.topic == Topic("orders", 8, 6, Permission.READ, MessageType.NORMAL)
    assert await admin.topics() == [updated.topic]

    await admin.delete_topic("orders")
    assert await admin.topics() == []


async def test_system_topics_are_listed_only_on_request(admin: BrokerAdmin) -> None:
    await admin.put_topic(Topic("orders", 2, 2))
    everything = await admin.topics(include_system=True)
    revive = [t for t in everything if t.system]
    assert [t.name for t in revive] == [f"rmq_sys_REVIVE_LOG_{CLUSTER}"]
    assert revive[0].read_queue_nums == REVIVE_QUEUES
    assert [t.name for t in await admin.topics()] == ["orders"]


async def test_shrinking_queues_is_refused_naming_the_current_counts(
    admin: BrokerAdmin, broker: Broker
) -> None:
    await admin.put_topic(Topic("orders", 8, 8))
    before = await broker.snapshot()
    for read, write in ((4, 8), (8, 4), (1, 1)):
        with pytest.raises(errors.FailedPrecondition) as caught:
            await admin.put_topic(Topic("orders", read, write))
        assert caught.value.reason == "QUEUE_SHRINK"
        assert "has 8 read and 8 write queues" in caught.value.message
        assert not caught.value.retriable
    assert await broker.snapshot() == before


async def test_group_create_update_list_delete(admin: BrokerAdmin) -> None:
    policy = RetryPolicy(RetryKind.CUSTOMIZED, customized_backoff_ms=(1_000, 5_000, 30_000))
    created = await admin.put_group(Group("billing", max_reconsume_times=3, retry_policy=policy))
    assert created.created
    assert created.group == Group("billing", 3, policy, fifo=False, consume_enable=True)

    updated = await admin.put_group(Group("billing", 0, fifo=True, consume_enable=False))
    assert not updated.created
    assert updated.group == Group("billing", 0, RetryPolicy(), fifo=True, consume_enable=False)
    assert await admin.groups() == [updated.group]

    await admin.delete_group("billing")
    assert await admin.groups() == []


async def test_consume_mode_set_get_list(admin: BrokerAdmin) -> None:
    await admin.put_topic(Topic("orders", 2, 2))
    await admin.put_group(Group("billing"))

    default = await admin.consume_mode("billing", "orders")
    assert default == ConsumeModeSetting("billing", "orders", ConsumeMode.PULL, 0, False)

    pop = await admin.set_consume_mode(
        "billing", "orders", mode=ConsumeMode.POP, pop_share_queue_num=1
    )
    assert pop == ConsumeModeSetting("billing", "orders", ConsumeMode.POP, 1, True)
    assert await admin.consume_mode("billing", "orders") == pop
    assert await admin.consume_modes() == [pop]
    assert await admin.consume_modes("billing") == [pop]

    back = await admin.set_consume_mode("billing", "orders", mode=ConsumeMode.PULL)
    assert back == ConsumeModeSetting("billing", "orders", ConsumeMode.PULL, 0, True)


async def test_consume_mode_survives_a_broker_restart(broker: Broker) -> None:
    async with broker.client() as admin:
        await admin.put_topic(Topic("orders", 2, 2))
        await admin.put_group(Group("billing"))
        await admin.set_consume_mode(
            "billing", "orders", mode=ConsumeMode.POP, pop_share_queue_num=2
        )
    data_dir = broker.store.data_dir
    await broker.server.stop(None)
    await broker.store.close()

    from popbroker.admin.server import serve_admin  # noqa: PLC0415
    from tests.integration.admin.conftest import open_store  # noqa: PLC0415

    store = open_store(data_dir)
    server = await serve_admin(store, listen="127.0.0.1:0")
    try:
        async with BrokerAdmin(f"127.0.0.1:{server.port}", timeout_s=5.0) as admin:
            mode = await admin.consume_mode("billing", "orders")
            assert (mode.mode, mode.pop_share_queue_num) == (ConsumeMode.POP, 2)
    finally:
        await server.stop(None)
        await store.close()
    # The fixture's teardown stops the old server and store again: both are idempotent.


async def test_deleting_a_topic_or_group_drops_its_modes(admin: BrokerAdmin) -> None:
    await admin.put_topic(Topic("orders", 2, 2))
    await admin.put_topic(Topic("refunds", 2, 2))
    await admin.put_group(Group("billing"))
    await admin.set_consume_mode("billing", "orders", mode=ConsumeMode.POP)
    await admin.set_consume_mode("billing", "refunds", mode=ConsumeMode.POP)
    await admin.delete_topic("orders")
    assert [m.topic for m in await admin.consume_modes()] == ["refunds"]
    await admin.delete_group("billing")
    assert await admin.consume_modes() == []
