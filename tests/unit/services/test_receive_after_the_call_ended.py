"""ReceiveMessage writes nothing to a call that already ended, and loses nothing by it.

A client may cancel a receive, or its deadline may pass, while the broker is still popping
(a slow or frozen store). gRPC refuses a write to a finished call and logs it as a servicer
error; the servicer checks the call first. The messages it popped stay in flight and come
back after their invisible time, as for any client that never acks.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from popbroker.grpc.protocol import service
from popbroker.grpc.servicer import MessagingServicer
from popbroker.services.routing import Endpoint
from tests.unit.services.conftest import GROUP, TOPIC, Broker

INVISIBLE_MS = 10_000


class CallContext:
    """The part of grpc.aio's ServicerContext ReceiveMessage uses; ``ends_after`` writes
    (None: never) the call reports itself done, as after a cancel or a passed deadline."""

    def __init__(self, *, done_at_start: bool = False, ends_after: int | None = None) -> None:
        self.finished = done_at_start
        self.ends_after = ends_after
        self.written = 0

    def time_remaining(self) -> float:
        return 30.0

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ()

    def done(self) -> bool:
        return self.finished

    def wrote(self) -> None:
        self.written += 1
        if self.ends_after is not None and self.written >= self.ends_after:
            self.finished = True


def receive_request() -> Any:
    request = service.ReceiveMessageRequest()
    request.group.name = GROUP
    request.message_queue.topic.name = TOPIC
    request.message_queue.id = -1
    request.filter_expression.expression = "*"
    request.batch_size = 8
    request.invisible_duration.seconds = INVISIBLE_MS // 1000
    request.long_polling_timeout.seconds = 0
    return request


async def answers(servicer: MessagingServicer, context: CallContext) -> list[Any]:
    out = []
    async for response in servicer.ReceiveMessage(receive_request(), context):
        out.append(response)
        context.wrote()
    return out


@pytest.fixture
def servicer(broker: Broker) -> MessagingServicer:
    return MessagingServicer(broker.popack, advertised=Endpoint("127.0.0.1", 8081))


async def test_a_call_that_ended_before_the_answer_gets_no_write_and_loses_nothing(
    broker: Broker, servicer: MessagingServicer, caplog: pytest.LogCaptureFixture
) -> None:
    for i in range(3):
        await broker.send(f"m{i}".encode())
    with caplog.at_level(logging.WARNING, logger="popbroker.grpc.servicer"):
        assert await answers(servicer, CallContext(done_at_start=True)) == []
    assert "3 popped message(s) come back" in caplog.text
    assert await broker.receive() == []  # in flight: popped for the call that went away
    broker.clock.advance(INVISIBLE_MS)
    await broker.flush()
    broker.clock.advance(1_000)
    await broker.revive_step()
    back = await broker.receive()
    assert sorted(m.stored.body for m in back) == [b"m0", b"m1", b"m2"]


async def test_a_call_that_ends_mid_batch_gets_no_more_writes(
    broker: Broker, servicer: MessagingServicer
) -> None:
    for i in range(3):
        await broker.send(f"m{i}".encode())
    got = await answers(servicer, CallContext(ends_after=2))  # the status, then one message
    assert [r.WhichOneof("content") for r in got] == ["status", "message"]


async def test_a_live_call_gets_the_status_the_messages_and_the_delivery_time(
    broker: Broker, servicer: MessagingServicer
) -> None:
    await broker.send(b"m0")
    got = await answers(servicer, CallContext())
    assert [r.WhichOneof("content") for r in got] == ["status", "message", "delivery_timestamp"]
