"""PullMessage, GetOffset, UpdateOffset and QueryOffset over the wire (lite pull consumers).

The Python client never calls these RPCs, so they are driven through the
official package's generated stub, as a lite pull consumer would call them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from popbroker.grpc.protocol import Code, MessagingServiceStub, definition, service
from tests.integration.broker import officialclient as oc
from tests.integration.broker.conftest import TOPIC
from tests.integration.broker.harness import BrokerProcess

METADATA = (("x-mq-client-id", "lite-pull-test@1"),)
PULL_GROUP = "other"


@pytest.fixture
async def stub(shared_broker: BrokerProcess) -> AsyncIterator[Any]:
    async with grpc.aio.insecure_channel(shared_broker.endpoint) as channel:
        yield MessagingServiceStub(channel)


def _queue(queue_id: int) -> Any:
    return definition.MessageQueue(topic=definition.Resource(name=TOPIC), id=queue_id)


async def _pull(stub: Any, queue_id: int, offset: int) -> tuple[int, list[Any], int]:
    request = service.PullMessageRequest(
        group=definition.Resource(name=PULL_GROUP),
        message_queue=_queue(queue_id),
        offset=offset,
        batch_size=32,
    )
    request.long_polling_timeout.seconds = 1
    responses = [r async for r in stub.PullMessage(request, metadata=METADATA, timeout=10)]
    status = next(r.status.code for r in responses if r.HasField("status"))
    messages = [r.message for r in responses if r.HasField("message")]
    next_offset = next(r.next_offset for r in responses if r.HasField("next_offset"))
    return status, messages, next_offset


async def test_pull_and_offsets(shared_broker: BrokerProcess, stub: Any) -> None:
    with oc.producer(shared_broker.endpoint, [TOPIC]) as producer:
        for i in range(8):
            producer.send(oc.message(TOPIC, f"pull-{i}".encode(), tag="lite"))
    end = await stub.QueryOffset(
        service.QueryOffsetRequest(message_queue=_queue(0), query_offset_policy=definition.END),
        metadata=METADATA,
        timeout=10,
    )
    assert end.status.code == Code.OK
    status, messages, next_offset = await _pull(stub, 0, 0)
    assert status == Code.OK
    assert next_offset == end.offset == len(messages) > 0
    assert {m.system_properties.tag for m in messages} == {"lite"}
    assert all(m.system_properties.body_encoding == definition.IDENTITY for m in messages)
    status, messages, same = await _pull(stub, 0, next_offset)  # long-polls ~1 s, then empty
    assert (status, messages, same) == (Code.MESSAGE_NOT_FOUND, [], next_offset)

    group = definition.Resource(name=PULL_GROUP)
    missing = await stub.GetOffset(
        service.GetOffsetRequest(group=group, message_queue=_queue(1)),
        metadata=METADATA,
        timeout=10,
    )
    assert missing.status.code == Code.OFFSET_NOT_FOUND
    updated = await stub.UpdateOffset(
        service.UpdateOffsetRequest(group=group, message_queue=_queue(1), offset=1),
        metadata=METADATA,
        timeout=10,
    )
    assert updated.status.code == Code.OK
    got = await stub.GetOffset(
        service.GetOffsetRequest(group=group, message_queue=_queue(1)),
        metadata=METADATA,
        timeout=10,
    )
    assert (got.status.code, got.offset) == (Code.OK, 1)
    refused = await stub.UpdateOffset(
        service.UpdateOffsetRequest(group=group, message_queue=_queue(1), offset=10**9),
        metadata=METADATA,
        timeout=10,
    )
    assert refused.status.code == Code.ILLEGAL_OFFSET
