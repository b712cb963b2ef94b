"""Bad input over the wire: the right status code in the response body, never a crash.

Raw v2 calls (the official package's generated stub) so the client's own
validation cannot hide what the broker answers.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from popbroker.grpc.protocol import Code, MessagingServiceStub, definition, service
from tests.integration.broker.conftest import GROUP, TOPIC
from tests.integration.broker.harness import WITH_FRONT, BrokerProcess

BROKER_MODES = WITH_FRONT  # also behind popfront (conftest)


METADATA = (("x-mq-client-id", "bad-input-test@1"),)


@pytest.fixture
async def stub(shared_broker: BrokerProcess) -> AsyncIterator[Any]:
    async with grpc.aio.insecure_channel(
        shared_broker.endpoint, options=[("grpc.max_send_message_length", 64 * 1024 * 1024)]
    ) as channel:
        yield MessagingServiceStub(channel)


def _resource(name: str) -> Any:
    return definition.Resource(name=name)


def _message(
    topic: str, body: bytes, *, message_type: int = definition.NORMAL, **system: Any
) -> Any:
    message = definition.Message(topic=_resource(topic), body=body)
    message.system_properties.message_id = system.pop("message_id", f"id-{time.monotonic_ns()}")
    message.system_properties.message_type = message_type
    message.system_properties.body_encoding = definition.IDENTITY
    for name, value in system.items():
        setattr(message.system_properties, name, value)
    return message


async def _receive(stub: Any, **fields: Any) -> list[Any]:
    request = service.ReceiveMessageRequest(
        group=_resource(fields.pop("group", GROUP)),
        message_queue=definition.MessageQueue(topic=_resource(fields.pop("topic", TOPIC)), id=0),
        batch_size=fields.pop("batch_size", 1),
    )
    request.long_polling_timeout.seconds = 1
    if "invisible_ms" in fields:
        invisible_ms = fields.pop("invisible_ms")
        request.invisible_duration.seconds = invisible_ms // 1000
        request.invisible_duration.nanos = invisible_ms % 1000 * 1_000_000
    assert not fields
    return [r async for r in stub.ReceiveMessage(request, metadata=METADATA, timeout=10)]


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"batch_size": 33}, Code.BAD_REQUEST),
        ({"batch_size": 0}, Code.BAD_REQUEST),
        ({"invisible_ms": 0}, Code.ILLEGAL_INVISIBLE_TIME),
        ({"invisible_ms": 13 * 3600 * 1000}, Code.ILLEGAL_INVISIBLE_TIME),
        ({"topic": "no-such-topic"}, Code.TOPIC_NOT_FOUND),
        ({"group": "no-such-group"}, Code.CONSUMER_GROUP_NOT_FOUND),
        ({"topic": f"%RETRY%{GROUP}+{TOPIC}"}, Code.TOPIC_NOT_FOUND),
    ],
)
async def test_receive_refusals(stub: Any, fields: dict[str, Any], code: int) -> None:
    responses = await _receive(stub, **fields)
    assert [r.WhichOneof("content") for r in responses] == ["status", "delivery_timestamp"]
    assert responses[0].status.code == code


async def test_empty_receive_is_message_not_found(stub: Any) -> None:
    responses = await _receive(stub, invisible_ms=10_000)
    assert responses[0].status.code == Code.MESSAGE_NOT_FOUND
    assert responses[-1].HasField("delivery_timestamp")


@pytest.mark.parametrize(
    ("message", "code"),
    [
        (_message(TOPIC, b""), Code.MESSAGE_BODY_EMPTY),
        (_message(TOPIC, b"x" * (4 * 1024 * 1024 + 1)), Code.MESSAGE_BODY_TOO_LARGE),
        (_message("no-such-topic", b"x"), Code.TOPIC_NOT_FOUND),
        (_message(TOPIC, b"x", message_id=""), Code.ILLEGAL_MESSAGE_ID),
        (_message(TOPIC, b"x", tag="a|b"), Code.ILLEGAL_MESSAGE_TAG),
        (
            _message(TOPIC, b"x", message_type=definition.FIFO, message_group="g"),
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        ),
        (_message(TOPIC, b"x", message_type=definition.TRANSACTION), Code.UNSUPPORTED),
    ],
)
async def test_send_refusals(stub: Any, message: Any, code: int) -> None:
    response = await stub.SendMessage(
        service.SendMessageRequest(messages=[message]), metadata=METADATA, timeout=10
    )
    assert response.status.code == code
    assert [e.status.code for e in response.entries] == [code]


async def test_send_without_messages_is_corrupted(stub: Any) -> None:
    response = await stub.SendMessage(service.SendMessageRequest(), metadata=METADATA, timeout=10)
    assert response.status.code == Code.MESSAGE_CORRUPTED


FORGED_HANDLES = [
    "",
    "garbage",
    "0 1700000000000 10000 0 0 broker-0 0 0",  # truncated
    "0 1700000000000 10000 0 0 broker-9 0 0 0",  # another broker
    f"0 {10**13} 10000 0 0 broker-0 0 0 0",  # from the future
    "0 1700000000000 10000 0 0 broker-0 0 0 0",  # long expired
    "0 0x10 10000 0 0 broker-0 0 0 0",
    "\uff19 1700000000000 10000 0 0 broker-0 0 0 0",  # a full-width digit
    "0 " * 300,
]


@pytest.mark.parametrize("handle", FORGED_HANDLES)
async def test_forged_handles(stub: Any, handle: str) -> None:
    ack = await stub.AckMessage(
        service.AckMessageRequest(
            group=_resource(GROUP),
            topic=_resource(TOPIC),
            entries=[service.AckMessageEntry(message_id="m", receipt_handle=handle)],
        ),
        metadata=METADATA,
        timeout=10,
    )
    assert ack.status.code == Code.INVALID_RECEIPT_HANDLE
    assert [e.status.code for e in ack.entries] == [Code.INVALID_RECEIPT_HANDLE]
    change = service.ChangeInvisibleDurationRequest(
        group=_resource(GROUP), topic=_resource(TOPIC), receipt_handle=handle, message_id="m"
    )
    change.invisible_duration.seconds = 10
    changed = await stub.ChangeInvisibleDuration(change, metadata=METADATA, timeout=10)
    assert changed.status.code == Code.INVALID_RECEIPT_HANDLE
    assert changed.receipt_handle == handle


async def test_unknown_route_and_client_id(stub: Any) -> None:
    route = await stub.QueryRoute(
        service.QueryRouteRequest(topic=_resource("no-such-topic")), metadata=METADATA, timeout=10
    )
    assert route.status.code == Code.TOPIC_NOT_FOUND
    beat = await stub.Heartbeat(service.HeartbeatRequest(), timeout=10)
    assert beat.status.code == Code.CLIENT_ID_REQUIRED
    ok = await stub.QueryRoute(
        service.QueryRouteRequest(topic=_resource(TOPIC)), metadata=METADATA, timeout=10
    )
    assert ok.status.code == Code.OK  # still serving after all of the above
    assert {q.broker.id for q in ok.message_queues} == {0}
    assert len(ok.message_queues) == 4


async def test_endpoint_reports_health(shared_broker: BrokerProcess) -> None:
    async with grpc.aio.insecure_channel(shared_broker.endpoint) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service_name in ("", "apache.rocketmq.v2.MessagingService"):
            reply = await health.Check(
                health_pb2.HealthCheckRequest(service=service_name), timeout=10
            )
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
