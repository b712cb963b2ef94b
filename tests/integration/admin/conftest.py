"""Fixtures: a real admin server over a ``LocalStore`` on 127.0.0.1, and its typed client.

The server runs in the test's event loop (``serve_admin`` on port 0); the client
talks to it over real gRPC. ``clock`` is injected so ages and lags are exact.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from popbroker.admin.server import AdminServer, serve_admin
from popbroker.store.api import (
    ClusterMember,
    CommittedOffset,
    ConsumeModeConfig,
    GroupConfig,
    TopicConfig,
)
from popbroker.store.local import LocalStore
from popfleet_api.admin.v1 import admin_pb2_grpc
from popfleet_api.client import BrokerAdmin
from tests.storesettings import small_settings

CLUSTER = "test-cluster"
BROKER = "broker-a"
REVIVE_QUEUES = 2
NOW_MS = 1_900_000_000_000


class FakeClock:
    """Milliseconds since the epoch, moved by the test."""

    def __init__(self, now_ms: int = NOW_MS) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


@dataclass
class Broker:
    """One running admin server and what a test needs around it."""

    store: LocalStore
    server: AdminServer
    clock: FakeClock

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    def client(self, **kwargs: object) -> BrokerAdmin:
        return BrokerAdmin(self.target, timeout_s=5.0, **kwargs)  # type: ignore[arg-type]

    def raw_channel(self) -> grpc.aio.Channel:
        return grpc.aio.insecure_channel(self.target, options=(("grpc.enable_http_proxy", 0),))

    async def snapshot(
        self,
    ) -> tuple[
        list[TopicConfig],
        list[GroupConfig],
        list[ConsumeModeConfig],
        list[ClusterMember],
        list[CommittedOffset],
        str,
    ]:
        """Everything a refused call must leave unchanged."""
        return (
            await self.store.topics(),
            await self.store.groups(),
            await self.store.consume_modes(),
            await self.store.members(),
            await self.store.committed_offsets(),
            (await self.store.info()).config_epoch,
        )


def open_store(
    data_dir: Path, *, broker_name: str = BROKER, clock: FakeClock | None = None
) -> LocalStore:
    return LocalStore.open(
        data_dir,
        small_settings(cluster=CLUSTER, broker_name=broker_name, revive_queue_num=REVIVE_QUEUES),
        clock=clock or FakeClock(),
    )


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    clock = FakeClock()
    store = open_store(tmp_path / "data", clock=clock)
    server = await serve_admin(store, listen="127.0.0.1:0", clock=clock)
    try:
        yield Broker(store=store, server=server, clock=clock)
    finally:
        await server.stop(None)
        await store.close()


@pytest.fixture
async def admin(broker: Broker) -> AsyncIterator[BrokerAdmin]:
    async with broker.client() as client:
        yield client


@pytest.fixture
async def raw_stub(broker: Broker) -> AsyncIterator[admin_pb2_grpc.BrokerAdminStub]:
    """The generated stub, for requests the typed client cannot express (UNSPECIFIED enums)."""
    channel = broker.raw_channel()
    try:
        yield admin_pb2_grpc.BrokerAdminStub(channel)
    finally:
        await channel.close()
