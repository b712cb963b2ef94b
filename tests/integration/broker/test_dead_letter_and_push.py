"""Dead letters after the group's maximum, and a PushConsumer end to end."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from rocketmq import ConsumeResult, FilterExpression, MessageListener, PushConsumer

from popbroker.pop import retrytopics
from popbroker.store.local import LocalStore
from tests.integration.broker import officialclient as oc
from tests.integration.broker.conftest import GROUP, TOPIC
from tests.integration.broker.harness import BrokerProcess, store_settings


async def _read_all(broker: BrokerProcess, topic: str) -> list[Any]:
    store = LocalStore.open(broker.data_dir, store_settings())
    try:
        result = await store.read(topic, 0, 0, max_count=100)
        return list(result.messages)
    finally:
        await store.close()


def test_dead_letter_after_max_attempts_exactly_once(broker: BrokerProcess) -> None:
    with oc.producer(broker.endpoint, [TOPIC]) as producer:
        message_id = producer.send(oc.message(TOPIC, b"poison")).message_id
    attempts: list[int] = []
    with oc.simple_consumer(broker.endpoint, GROUP, TOPIC, await_duration_s=3) as consumer:
        deadline = time.monotonic() + 40
        while len(attempts) < 3 and time.monotonic() < deadline:
            attempts.extend(m.delivery_attempt for m in consumer.receive(16, 1))
        assert attempts == [1, 2, 3]  # the group's max_reconsume_times is 2
        assert consumer.receive(16, 1) == []  # past its third deadline, into the DLQ
    broker.stop()
    dead = asyncio.run(_read_all(broker, retrytopics.dlq_topic(GROUP)))
    assert [(m.body, m.properties["UNIQ_KEY"], m.reconsume_times) for m in dead] == [
        (b"poison", message_id, 3)
    ]


class _Listener(MessageListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.consumed: dict[bytes, list[int]] = {}

    def consume(self, message: Any) -> Any:
        with self.lock:
            self.consumed.setdefault(message.body, []).append(message.delivery_attempt)
            first = len(self.consumed[message.body]) == 1
        if message.body == b"fail-once" and first:
            return ConsumeResult.FAILURE
        return ConsumeResult.SUCCESS

    def done(self, bodies: set[bytes]) -> bool:
        with self.lock:
            return bodies <= set(self.consumed) and len(self.consumed[b"fail-once"]) >= 2


def test_push_consumer_end_to_end(broker: BrokerProcess) -> None:
    bodies = {f"push-{i}".encode() for i in range(10)} | {b"fail-once"}
    listener = _Listener()
    consumer = PushConsumer(
        oc.configuration(broker.endpoint), "other", listener, {TOPIC: FilterExpression()}
    )
    consumer.startup()
    try:
        with oc.producer(broker.endpoint, [TOPIC]) as producer:
            for body in sorted(bodies):
                producer.send(oc.message(TOPIC, body))
        deadline = time.monotonic() + 60
        while not listener.done(bodies) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert listener.done(bodies), listener.consumed
    finally:
        consumer.shutdown()
    assert listener.consumed[b"fail-once"][:2] == [1, 2]
    assert all(listener.consumed[b] == [1] for b in bodies - {b"fail-once"})
