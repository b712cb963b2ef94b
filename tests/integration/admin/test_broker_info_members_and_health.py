"""Broker info, cluster membership, health, and the bearer token."""

from __future__ import annotations

import socket

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from popbroker.admin.server import serve_admin
from popfleet_api import errors
from popfleet_api.client import BrokerAdmin
from popfleet_api.models import FlushMode, Member, Topic
from tests.integration.admin.conftest import BROKER, CLUSTER, NOW_MS, REVIVE_QUEUES, Broker

TOKEN = "s3cret-token"


async def test_broker_info(admin: BrokerAdmin, broker: Broker) -> None:
    info = await admin.info()
    assert (info.cluster, info.broker_name) == (CLUSTER, BROKER)
    assert info.ready
    assert info.version
    assert info.flush_mode is FlushMode.ASYNC
    assert info.revive_queue_num == REVIVE_QUEUES
    assert info.config_epoch == (await broker.store.info()).config_epoch
    assert info.client_endpoint == ""  # not a member yet, no endpoint configured
    assert info.now_ms == NOW_MS
    assert (await admin.info()).config_epoch == info.config_epoch  # stable while running


async def test_members_set_get_and_the_advertised_endpoint(admin: BrokerAdmin) -> None:
    members = [Member("broker-b", "10.0.0.2:8081"), Member(BROKER, "pod-a.svc:8081")]
    stored = await admin.set_members(members)
    assert stored == sorted(members, key=lambda m: m.broker_name)
    assert await admin.members() == stored
    assert (await admin.info()).client_endpoint == "pod-a.svc:8081"
    assert await admin.set_members([]) == []


async def test_health_serves_without_a_token(broker: Broker) -> None:
    server = await serve_admin(broker.store, listen="127.0.0.1:0", token=TOKEN)
    channel = grpc.aio.insecure_channel(
        f"127.0.0.1:{server.port}", options=(("grpc.enable_http_proxy", 0),)
    )
    try:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", "popfleet.admin.v1.BrokerAdmin"):
            answer = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        async with BrokerAdmin(f"127.0.0.1:{server.port}", timeout_s=5.0) as anonymous:
            assert await anonymous.serving()
        await server.set_serving(False)
        async with BrokerAdmin(f"127.0.0.1:{server.port}", timeout_s=5.0) as anonymous:
            assert not await anonymous.serving()
    finally:
        await channel.close()
        await server.stop(None)


async def test_token_required_accepted_and_refused(broker: Broker) -> None:
    server = await serve_admin(broker.store, listen="127.0.0.1:0", token=TOKEN)
    target = f"127.0.0.1:{server.port}"
    try:
        async with BrokerAdmin(target, timeout_s=5.0) as anonymous:
            with pytest.raises(errors.Unauthenticated) as missing:
                await anonymous.put_topic(Topic("orders", 2, 2))
            assert missing.value.reason == "TOKEN_REQUIRED"
            with pytest.raises(errors.Unauthenticated):
                async for _ in anonymous.scan_offsets():
                    pass
        async with BrokerAdmin(target, token="wrong", timeout_s=5.0) as wrong:
            with pytest.raises(errors.Unauthenticated) as refused:
                await wrong.info()
            assert refused.value.reason == "TOKEN_REFUSED"
            assert not refused.value.retriable
            assert refused.value.target == target
        assert await broker.store.topics() == [
            t for t in await broker.store.topics() if t.name != "orders"
        ]
        async with BrokerAdmin(target, token=TOKEN, timeout_s=5.0) as trusted:
            assert (await trusted.put_topic(Topic("orders", 2, 2))).created
            assert [t.name for t in await trusted.topics()] == ["orders"]
            pages = [page async for page in trusted.scan_offsets()]
            assert pages[-1].end_of_table
    finally:
        await server.stop(None)


async def test_unreachable_broker_is_a_retriable_error() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        target = f"127.0.0.1:{probe.getsockname()[1]}"  # bound, never listening
        async with BrokerAdmin(target, timeout_s=2.0) as admin:
            with pytest.raises(errors.AdminError) as caught:
                await admin.info()
    assert caught.value.retriable
    assert caught.value.target == target
