"""``popbroker all --admin-listen``: the admin API beside the client endpoint, on one store.

A topic and a group created through the admin API are served to the official
client at once (the endpoint's configuration cache refreshes on a miss), and
the admin API reports the live revive ledgers and checkpoint buffer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from popfleet_api import models
from popfleet_api.client import BrokerAdmin
from tests.integration.broker import officialclient as oc
from tests.integration.broker.conftest import GROUPS, TOPICS
from tests.integration.broker.harness import BrokerProcess


@pytest.fixture
def admin_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess.start(
        tmp_path / "broker", mode="all", topics=TOPICS, groups=GROUPS, admin=True
    )
    try:
        yield process
    finally:
        process.stop()
        print(process.logs())


async def _admin_setup(target: str, endpoint: str) -> models.ReviveStats:
    async with BrokerAdmin(target) as admin:
        info = await admin.info()
        assert info.ready
        assert info.broker_name == "broker-0"
        assert info.client_endpoint == endpoint
        await admin.put_topic(models.Topic("fresh", read_queue_nums=2, write_queue_nums=2))
        await admin.put_group(models.Group("fresh-readers"))
        return await admin.revive_stats()


def test_topics_created_through_admin_are_served(admin_broker: BrokerProcess) -> None:
    target = f"127.0.0.1:{admin_broker.admin_port}"
    stats = asyncio.run(_admin_setup(target, admin_broker.endpoint))
    assert stats.checkpoint_buffer is not None  # live, from the popack role
    assert [q.ledger is not None for q in stats.queues] == [True] * len(stats.queues)
    with oc.producer(admin_broker.endpoint, ["fresh"]) as producer:
        message_id = producer.send(oc.message("fresh", b"via admin")).message_id
    with oc.simple_consumer(admin_broker.endpoint, "fresh-readers", "fresh") as consumer:
        (message,) = oc.receive_until(consumer, 1)
        assert message.message_id == message_id
        consumer.ack(message)
