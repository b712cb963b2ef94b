"""Fixtures for the services tests: a LocalStore, a settable clock, the popack and revive roles.

The clock is injected everywhere (store timestamps, checkpoints, handles,
revive deadlines), so tests move time explicitly instead of sleeping.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from popbroker.services.configcache import ConfigCache
from popbroker.services.messages import (
    DeliveredMessage,
    MessageKind,
    OutgoingMessage,
    SendReceipt,
)
from popbroker.services.popack import PopackServices
from popbroker.services.receiving import ReceiveRequest
from popbroker.services.reviving import ReviveService
from popbroker.services.routing import Endpoint
from popbroker.services.sending import Sender
from popbroker.services.settings import PopackSettings, ReviveRoleSettings
from popbroker.store import names
from popbroker.store.api import GroupConfig, MessageType, TopicConfig
from popbroker.store.local import LocalStore
from tests.storesettings import small_settings

T0_MS = 1_700_000_000_000
TOPIC = "orders"
GROUP = "billing"


class FakeClock:
    """Milliseconds that move only when a test says so."""

    def __init__(self, now_ms: int = T0_MS) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


@dataclass
class Broker:
    """A popack role and a revive role on one store, sharing one fake clock."""

    store: LocalStore
    clock: FakeClock
    popack: PopackServices
    revive: ReviveService

    async def send(
        self,
        body: bytes,
        *,
        topic: str = TOPIC,
        message_id: str | None = None,
        kind: MessageKind = MessageKind.NORMAL,
        tag: str | None = None,
        message_group: str | None = None,
        delivery_timestamp_ms: int | None = None,
    ) -> SendReceipt:
        message = OutgoingMessage(
            topic=topic,
            body=body,
            message_id=message_id or f"id-{body.decode(errors='replace')}",
            kind=kind,
            tag=tag,
            message_group=message_group,
            delivery_timestamp_ms=delivery_timestamp_ms,
        )
        return await send_one(self.popack.sender, message)

    async def receive(
        self,
        batch: int = 32,
        *,
        invisible_ms: int = 10_000,
        group: str = GROUP,
        topic: str = TOPIC,
        filter_expression: str = "*",
    ) -> list[DeliveredMessage]:
        request = ReceiveRequest(
            group=group,
            topic=topic,
            batch_size=batch,
            invisible_ms=invisible_ms,
            poll_ms=0,
            filter_expression=filter_expression,
        )
        return list(await self.popack.receiver.receive(request))

    async def ack(self, message: DeliveredMessage, *, group: str = GROUP) -> None:
        await self.popack.acker.ack(
            group=group, topic=message.topic, receipt_handle=message.receipt_handle
        )

    async def flush(self) -> None:
        await self.popack.flusher.flush_once()

    async def revive_step(self) -> None:
        """One step of every revive worker, as the revive role's loop takes them."""
        for worker in self.revive.workers:
            await worker.step()

    async def persisted_revive_offset(self, revive_queue_id: int) -> int | None:
        """The revive progress the store holds for one revive queue."""
        topic = names.revive_topic((await self.store.info()).cluster)
        return await self.store.committed_offset(
            group=names.REVIVE_GROUP, topic=topic, queue_id=revive_queue_id
        )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def broker(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Broker]:
    store = LocalStore.open(tmp_path / "data", small_settings(revive_queue_num=2), clock=clock)
    try:
        await store.put_topic(TopicConfig(TOPIC, read_queue_nums=2, write_queue_nums=2))
        await store.put_topic(TopicConfig("fifo-orders", 2, 2, message_type=MessageType.FIFO))
        await store.put_topic(TopicConfig("mixed", 1, 1, message_type=MessageType.MIXED))
        await store.put_group(GroupConfig(GROUP, max_reconsume_times=2))
        await store.put_group(GroupConfig("fifo-group", fifo=True))
        await store.put_group(GroupConfig("fifo-strict", fifo=True, max_reconsume_times=1))
        popack = await PopackServices.open(
            store,
            advertised=Endpoint("127.0.0.1", 8081),
            settings=PopackSettings(config_ttl_ms=0),
            clock=clock,
            rng=random.Random(7),
        )
        info = await store.info()
        revive = ReviveService(
            store=store,
            settings=ReviveRoleSettings(cluster=info.cluster, broker_name=info.broker_name),
            clock=clock,
            config=ConfigCache(store, clock=clock, ttl_ms=0),
        )
        await revive.open()
        yield Broker(store=store, clock=clock, popack=popack, revive=revive)
    finally:
        await store.close()


async def send_one(sender: Sender, message: OutgoingMessage) -> SendReceipt:
    """``Sender.send_batch`` of one message: its receipt, or its error raised."""
    (outcome,) = await sender.send_batch([message])
    if isinstance(outcome, Exception):
        raise outcome
    return outcome
