"""An un-acked message comes back after its invisible time with delivery_attempt + 1."""

from __future__ import annotations

import time

from tests.integration.broker import officialclient as oc
from tests.integration.broker.conftest import GROUP, TOPIC
from tests.integration.broker.harness import BrokerProcess

INVISIBLE_S = 2


def test_unacked_message_returns_with_next_attempt(broker: BrokerProcess) -> None:
    with oc.producer(broker.endpoint, [TOPIC]) as producer:
        message_id = producer.send(oc.message(TOPIC, b"again")).message_id
    with oc.simple_consumer(broker.endpoint, GROUP, TOPIC) as consumer:
        (first,) = oc.receive_until(consumer, 1, invisible_s=INVISIBLE_S)
        deadline = time.monotonic() + INVISIBLE_S
        (second,) = oc.receive_until(consumer, 1, invisible_s=INVISIBLE_S)
        returned_at = time.monotonic()
        assert second.message_id == message_id
        assert second.body == b"again"
        assert first.delivery_attempt == 1
        assert second.delivery_attempt == 2
        assert returned_at >= deadline - 0.1
        assert returned_at - deadline < 2.0  # revive lateness well under the client's patience
        consumer.ack(second)
        assert consumer.receive(16, INVISIBLE_S) == []
