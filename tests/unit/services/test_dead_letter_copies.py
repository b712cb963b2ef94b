"""Dead-letter copies: one rule (pop/retrytopics.dead_letter) through each path that makes them.

Revive past the maximum, FIFO pop past the maximum and a client's forward to the
DLQ all append to ``%DLQ%<group>`` queue 0 a copy that keeps the message's
properties, names the user topic in ``ORIGIN_TOPIC`` unless an earlier hop did,
and carries the number of deliveries as its reconsume times.
"""

from __future__ import annotations

from popbroker.pop import retrytopics
from popbroker.services.messages import MessageKind
from popbroker.store.api import StoredMessage
from tests.unit.services.conftest import GROUP, TOPIC, Broker

FIFO_TOPIC = "fifo-orders"
ORIGIN = retrytopics.PROPERTY_ORIGIN_TOPIC


async def _dead_letters(broker: Broker, group: str) -> list[StoredMessage]:
    result = await broker.store.read(retrytopics.dlq_topic(group), 0, 0, max_count=10)
    return list(result.messages)


async def _expire(broker: Broker, invisible_ms: int) -> None:
    broker.clock.advance(invisible_ms)
    await broker.flush()
    broker.clock.advance(1_000)
    await broker.revive_step()


async def test_revive_dead_letter_keeps_the_first_hops_origin(broker: Broker) -> None:
    await broker.send(b"poison", message_id="MSG-P", tag="red")
    for _ in range(4):  # max_reconsume_times = 2: three deliveries, then the DLQ
        await broker.receive(invisible_ms=5_000)
        await _expire(broker, 5_000)
    (copy,) = await _dead_letters(broker, GROUP)
    assert copy.topic == f"%DLQ%{GROUP}"
    assert copy.queue_id == 0
    assert copy.reconsume_times == 3
    # The retry copies were read from %RETRY%billing+orders; the origin stays the user topic.
    assert copy.properties[ORIGIN] == TOPIC
    assert copy.properties["UNIQ_KEY"] == "MSG-P"
    assert copy.properties["TAGS"] == "red"
    assert "1ST_POP_TIME" in copy.properties


async def test_fifo_dead_letter_names_its_topic_and_keeps_the_message_group(
    broker: Broker,
) -> None:
    await broker.send(
        b"poison", topic=FIFO_TOPIC, kind=MessageKind.FIFO, message_group="g9", message_id="F-1"
    )
    for _ in range(3):  # max_reconsume_times = 1: two deliveries, then the DLQ
        await broker.receive(topic=FIFO_TOPIC, group="fifo-strict", batch=1, invisible_ms=5_000)
        broker.clock.advance(5_000)
    (copy,) = await _dead_letters(broker, "fifo-strict")
    assert copy.topic == "%DLQ%fifo-strict"
    assert copy.reconsume_times == 2
    assert copy.properties[ORIGIN] == FIFO_TOPIC
    assert copy.properties["__SHARDINGKEY"] == "g9"
    assert copy.properties["UNIQ_KEY"] == "F-1"


async def test_forward_to_dlq_copies_with_the_delivery_attempt(broker: Broker) -> None:
    await broker.send(b"bad", message_id="MSG-F")
    (first,) = await broker.receive(invisible_ms=5_000)
    await broker.popack.acker.forward_to_dlq(
        group=GROUP, topic=first.topic, receipt_handle=first.receipt_handle
    )
    (copy,) = await _dead_letters(broker, GROUP)
    assert copy.topic == f"%DLQ%{GROUP}"
    assert copy.reconsume_times == first.delivery_attempt == 1
    assert copy.properties[ORIGIN] == TOPIC
    assert copy.properties["UNIQ_KEY"] == "MSG-F"
    # Forwarding acks the handle: the message does not come back.
    await _expire(broker, 5_000)
    assert await broker.receive() == []


async def test_forward_of_a_retried_message_keeps_the_original_topic(broker: Broker) -> None:
    await broker.send(b"again", message_id="MSG-R")
    await broker.receive(invisible_ms=5_000)
    await _expire(broker, 5_000)
    (retried,) = await broker.receive(invisible_ms=5_000)
    assert retried.stored.topic == retrytopics.retry_topic(GROUP, TOPIC)
    await broker.popack.acker.forward_to_dlq(
        group=GROUP, topic=retried.topic, receipt_handle=retried.receipt_handle
    )
    (copy,) = await _dead_letters(broker, GROUP)
    assert copy.properties[ORIGIN] == TOPIC  # not overwritten by the retry hop
    assert copy.reconsume_times == retried.delivery_attempt == 2


async def test_forward_of_a_fifo_message_counts_its_redeliveries(broker: Broker) -> None:
    await broker.send(b"f", topic=FIFO_TOPIC, kind=MessageKind.FIFO, message_group="g3")
    await broker.receive(topic=FIFO_TOPIC, group="fifo-group", batch=1, invisible_ms=5_000)
    broker.clock.advance(5_000)
    (again,) = await broker.receive(
        topic=FIFO_TOPIC, group="fifo-group", batch=1, invisible_ms=5_000
    )
    await broker.popack.acker.forward_to_dlq(
        group="fifo-group", topic=again.topic, receipt_handle=again.receipt_handle
    )
    (copy,) = await _dead_letters(broker, "fifo-group")
    assert copy.reconsume_times == again.delivery_attempt == 2
    assert copy.properties[ORIGIN] == FIFO_TOPIC
