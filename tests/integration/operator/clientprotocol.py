"""What a client says to one broker, in the v2 protocol messages the official client ships.

Why not the official client's API: it follows the route to every member of the cluster
(a test that needs messages on one particular broker cannot pin it) and it never shows
``QueryAssignment`` answers. These helpers send the same generated ``apache.rocketmq.v2``
messages (``rocketmq.grpc_protocol``, through ``popbroker.grpc.protocol``) to one broker's
client endpoint: its loopback pod IP and port 8081 in the testbed.

Each call is bounded by a gRPC deadline; a non-OK status raises ``AssertionError`` with the
broker's message.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from popbroker.grpc.protocol import Code, MessagingServiceStub, definition, service
from popfleet_testbed import cluster, waiting

CLIENT_PORT = 8081
CLIENT_ID_HEADER = "x-mq-client-id"
DEADLINE_S = 10.0
T = TypeVar("T")


def endpoint(pod: dict[str, Any]) -> str:
    """A broker pod's client endpoint (its loopback pod IP in the testbed)."""
    return f"{cluster.Cluster.pod_ip(pod)}:{CLIENT_PORT}"


def _run(endpoint: str, call: Callable[[Any], Awaitable[T]]) -> T:
    async def run() -> T:
        async with grpc.aio.insecure_channel(endpoint) as channel:
            return await call(MessagingServiceStub(channel))

    return asyncio.run(run())


def _metadata(client_id: str) -> tuple[tuple[str, str], ...]:
    return ((CLIENT_ID_HEADER, client_id),)


def _ok(status: Any, what: str) -> None:
    assert status.code == Code.OK, f"{what}: {Code.Name(status.code)} {status.message}"


def heartbeat(endpoint: str, *, group: str, client_id: str) -> None:
    """A push consumer's heartbeat: the broker now counts ``client_id`` among the group's."""

    async def call(stub: Any) -> None:
        request = service.HeartbeatRequest(
            group=definition.Resource(name=group),
            client_type=definition.ClientType.PUSH_CONSUMER,
        )
        reply = await stub.Heartbeat(request, metadata=_metadata(client_id), timeout=DEADLINE_S)
        _ok(reply.status, f"Heartbeat {client_id}")

    _run(endpoint, call)


def query_assignment(
    endpoint: str, *, topic: str, group: str, client_id: str
) -> list[tuple[str, int]]:
    """The broker's assignment for ``client_id``: (broker name, queue id); -1 = every queue."""

    async def call(stub: Any) -> list[tuple[str, int]]:
        request = service.QueryAssignmentRequest(
            topic=definition.Resource(name=topic), group=definition.Resource(name=group)
        )
        reply = await stub.QueryAssignment(
            request, metadata=_metadata(client_id), timeout=DEADLINE_S
        )
        _ok(reply.status, f"QueryAssignment {client_id}")
        return sorted((a.message_queue.broker.name, a.message_queue.id) for a in reply.assignments)

    return _run(endpoint, call)


def send(endpoint: str, *, topic: str, count: int) -> None:
    """``count`` NORMAL messages appended on this broker (whatever its members)."""

    async def call(stub: Any) -> None:
        born_ms = int(time.time() * 1000)
        messages = []
        for i in range(count):
            props = definition.SystemProperties(
                message_id=uuid.uuid4().hex,
                body_encoding=definition.Encoding.IDENTITY,
                message_type=definition.MessageType.NORMAL,
                born_host="operator-tests",
            )
            props.born_timestamp.FromMilliseconds(born_ms)
            messages.append(
                definition.Message(
                    topic=definition.Resource(name=topic),
                    system_properties=props,
                    body=f"backlog {i}".encode(),
                )
            )
        reply = await stub.SendMessage(
            service.SendMessageRequest(messages=messages),
            metadata=_metadata("operator-tests-producer"),
            timeout=DEADLINE_S,
        )
        _ok(reply.status, f"SendMessage x{count}")

    _run(endpoint, call)


def receive_and_ack(endpoint: str, *, group: str, topic: str, batch: int = 32) -> int:
    """One POP round on this broker as a simple consumer: receive up to ``batch``, ack all."""

    async def call(stub: Any) -> int:
        request = service.ReceiveMessageRequest(
            group=definition.Resource(name=group),
            message_queue=definition.MessageQueue(topic=definition.Resource(name=topic), id=-1),
            filter_expression=definition.FilterExpression(
                type=definition.FilterType.TAG, expression="*"
            ),
            batch_size=batch,
            auto_renew=False,
        )
        request.invisible_duration.FromSeconds(30)
        request.long_polling_timeout.FromSeconds(1)
        metadata = _metadata("operator-tests-consumer")
        received = []
        async for reply in stub.ReceiveMessage(request, metadata=metadata, timeout=DEADLINE_S):
            if reply.HasField("message"):
                received.append(reply.message)
        if not received:
            return 0
        entries = [
            service.AckMessageEntry(
                message_id=m.system_properties.message_id,
                receipt_handle=m.system_properties.receipt_handle,
            )
            for m in received
        ]
        reply = await stub.AckMessage(
            service.AckMessageRequest(
                group=definition.Resource(name=group),
                topic=definition.Resource(name=topic),
                entries=entries,
            ),
            metadata=metadata,
            timeout=DEADLINE_S,
        )
        _ok(reply.status, f"AckMessage x{len(entries)}")
        return len(entries)

    return _run(endpoint, call)


def consume(endpoint: str, *, group: str, topic: str, count: int, timeout_s: float = 60) -> int:
    """POP rounds on this broker until ``count`` messages were acked; returns how many were."""
    acked = [0]

    def enough() -> bool:
        acked[0] += receive_and_ack(endpoint, group=group, topic=topic)
        return acked[0] >= count

    waiting.until(enough, timeout_s=timeout_s, what=f"{count} {topic} messages acked by {group}")
    return acked[0]
