"""FIFO groups: per message group order, a blocked queue, redelivery from the queue itself."""

from __future__ import annotations

from popbroker.pop import retrytopics
from popbroker.services.messages import MessageKind
from tests.unit.services.conftest import Broker

FIFO_TOPIC = "fifo-orders"
FIFO_GROUP = "fifo-group"


async def test_fifo_batch_blocks_the_queue_until_acked_or_visible(broker: Broker) -> None:
    for i in range(3):
        await broker.send(
            f"g1-{i}".encode(), topic=FIFO_TOPIC, kind=MessageKind.FIFO, message_group="g1"
        )
    got = await broker.receive(topic=FIFO_TOPIC, group=FIFO_GROUP, invisible_ms=5_000)
    assert [m.stored.body for m in got] == [b"g1-0", b"g1-1", b"g1-2"]
    assert await broker.receive(topic=FIFO_TOPIC, group=FIFO_GROUP) == []
    await broker.ack(got[0], group=FIFO_GROUP)
    assert await broker.receive(topic=FIFO_TOPIC, group=FIFO_GROUP) == []
    broker.clock.advance(5_000)
    again = await broker.receive(topic=FIFO_TOPIC, group=FIFO_GROUP, invisible_ms=5_000)
    assert [m.stored.body for m in again] == [b"g1-1", b"g1-2"]
    assert [m.delivery_attempt for m in again] == [2, 2]
    for message in again:
        await broker.ack(message, group=FIFO_GROUP)
    await broker.send(b"g1-3", topic=FIFO_TOPIC, kind=MessageKind.FIFO, message_group="g1")
    (last,) = await broker.receive(topic=FIFO_TOPIC, group=FIFO_GROUP)
    assert last.stored.body == b"g1-3"
    assert last.delivery_attempt == 1


async def test_one_message_group_keeps_one_queue(broker: Broker) -> None:
    receipts = [
        await broker.send(
            f"{i}".encode(), topic=FIFO_TOPIC, kind=MessageKind.FIFO, message_group="g7"
        )
        for i in range(5)
    ]
    assert len({r.queue_id for r in receipts}) == 1
    assert [r.queue_offset for r in receipts] == sorted(r.queue_offset for r in receipts)


async def test_fifo_message_past_the_maximum_goes_to_the_dlq_once(broker: Broker) -> None:
    for body in (b"poison", b"next"):
        await broker.send(body, topic=FIFO_TOPIC, kind=MessageKind.FIFO, message_group="g2")
    attempts: list[tuple[bytes, int]] = []
    for _ in range(2):  # max_reconsume_times = 1: two deliveries
        got = await broker.receive(
            topic=FIFO_TOPIC, group="fifo-strict", batch=1, invisible_ms=5_000
        )
        attempts.extend((m.stored.body, m.delivery_attempt) for m in got)
        broker.clock.advance(5_000)
    assert attempts == [(b"poison", 1), (b"poison", 2)]
    (following,) = await broker.receive(topic=FIFO_TOPIC, group="fifo-strict", batch=1)
    assert following.stored.body == b"next"
    dlq = await broker.store.read(retrytopics.dlq_topic("fifo-strict"), 0, 0, max_count=10)
    assert [(m.body, m.reconsume_times) for m in dlq.messages] == [(b"poison", 2)]
