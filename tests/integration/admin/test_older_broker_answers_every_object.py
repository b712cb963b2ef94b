"""A broker that predates ``ListTopicsRequest.names``/``ListGroupsRequest.names``.

Such a broker ignores the field (unknown proto fields are skipped) and answers every
topic or group. ``BrokerAdmin.topics(names=...)``/``groups(names=...)`` filter that
answer, so the operator reads one object the same way from an old and a new broker.
The old broker here is a real gRPC server whose servicer answers like the old one did:
everything, whatever was asked. The last test asks the current broker the same way,
on the wire, and gets only the named objects.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from popbroker.admin.server import serve_admin
from popfleet_api.admin.v1 import admin_pb2 as pb
from popfleet_api.admin.v1 import admin_pb2_grpc as pb_grpc
from popfleet_api.client import BrokerAdmin
from popfleet_api.models import Group, Topic
from tests.integration.admin.conftest import open_store


class OldBroker(pb_grpc.BrokerAdminServicer):
    def __init__(self) -> None:
        self.asked: list[list[str]] = []

    async def ListTopics(
        self, request: pb.ListTopicsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListTopicsResponse:
        self.asked.append(list(request.names))
        topics = [
            pb.Topic(
                name=name,
                read_queue_nums=2,
                write_queue_nums=2,
                perm=pb.PERMISSION_READ_WRITE,
                message_type=pb.MESSAGE_TYPE_NORMAL,
            )
            for name in ("a", "b", "c")
        ]
        return pb.ListTopicsResponse(topics=topics)

    async def ListGroups(
        self, request: pb.ListGroupsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListGroupsResponse:
        self.asked.append(list(request.names))
        policy = pb.RetryPolicy(
            kind=pb.RETRY_KIND_EXPONENTIAL,
            initial_backoff_ms=1000,
            max_backoff_ms=60000,
            multiplier=2.0,
        )
        groups = [
            pb.Group(name=name, max_reconsume_times=16, retry_policy=policy, consume_enable=True)
            for name in ("g-a", "g-b")
        ]
        return pb.ListGroupsResponse(groups=groups)


@pytest.fixture
async def old_broker() -> AsyncIterator[tuple[OldBroker, BrokerAdmin]]:
    servicer = OldBroker()  # type: ignore[abstract]  # the old broker answers only these two
    server = grpc.aio.server()
    pb_grpc.add_BrokerAdminServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with BrokerAdmin(f"127.0.0.1:{port}", timeout_s=5.0) as client:
            yield servicer, client
    finally:
        await server.stop(None)


async def test_the_client_filters_an_answer_of_every_topic(
    old_broker: tuple[OldBroker, BrokerAdmin],
) -> None:
    servicer, client = old_broker
    assert [t.name for t in await client.topics(names=["c", "z"])] == ["c"]
    assert [t.name for t in await client.topics()] == ["a", "b", "c"]
    assert await client.topics(names=["z"]) == []
    assert servicer.asked == [["c", "z"], [], ["z"]]


async def test_the_client_filters_an_answer_of_every_group(
    old_broker: tuple[OldBroker, BrokerAdmin],
) -> None:
    servicer, client = old_broker
    [group] = await client.groups(names=["g-b"])
    assert group == Group("g-b")
    assert [g.name for g in await client.groups()] == ["g-a", "g-b"]
    assert servicer.asked == [["g-b"], []]
    assert isinstance((await client.topics(names=["a"]))[0], Topic)


async def test_a_current_broker_answers_only_the_named_objects(tmp_path: Path) -> None:
    store = open_store(tmp_path / "data")
    server = await serve_admin(store, listen="127.0.0.1:0")
    try:
        async with BrokerAdmin(f"127.0.0.1:{server.port}", timeout_s=5.0) as client:
            for name in ("a", "b", "c"):
                await client.put_topic(Topic(name, 1, 1))
                await client.put_group(Group(f"g-{name}"))
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            stub = pb_grpc.BrokerAdminStub(channel)
            topics = await stub.ListTopics(pb.ListTopicsRequest(names=["c", "a", "a", "z"]))
            groups = await stub.ListGroups(pb.ListGroupsRequest(names=["g-b"]))
            every = await stub.ListTopics(pb.ListTopicsRequest())
        assert [t.name for t in topics.topics] == ["a", "c"]
        assert [g.name for g in groups.groups] == ["g-b"]
        assert [t.name for t in every.topics] == ["a", "b", "c"]
    finally:
        await server.stop(None)
        await store.close()
