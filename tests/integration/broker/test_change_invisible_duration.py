"""change_invisible_duration delays redelivery; the superseded handle is refused."""

from __future__ import annotations

import time

import pytest
from rocketmq.v5.exception import BadRequestException

from tests.integration.broker import officialclient as oc
from tests.integration.broker.conftest import GROUP, TOPIC
from tests.integration.broker.harness import WITH_FRONT, BrokerProcess

BROKER_MODES = WITH_FRONT  # also behind popfront (conftest)


INVALID_RECEIPT_HANDLE = 40013


def test_change_delays_and_old_handle_is_invalid(broker: BrokerProcess) -> None:
    with oc.producer(broker.endpoint, [TOPIC]) as producer:
        producer.send(oc.message(TOPIC, b"slow"))
    with oc.simple_consumer(broker.endpoint, GROUP, TOPIC) as consumer:
        (message,) = oc.receive_until(consumer, 1, invisible_s=2)
        old_handle = message.receipt_handle
        changed_at = time.monotonic()
        consumer.change_invisible_duration(message, 6)
        new_handle = message.receipt_handle
        assert new_handle
        assert new_handle != old_handle
        message._Message__receipt_handle = old_handle  # what a stale client would send
        with pytest.raises(BadRequestException) as refused:
            consumer.ack(message)
        assert refused.value.code == INVALID_RECEIPT_HANDLE
        # past the old deadline, nothing comes back
        assert consumer.receive(16, 2) == []
        (again,) = oc.receive_until(consumer, 1, invisible_s=30)
        assert time.monotonic() - changed_at >= 6 - 0.1
        assert again.delivery_attempt == 2
        consumer.ack(again)


def test_ack_with_the_new_handle_succeeds(broker: BrokerProcess) -> None:
    with oc.producer(broker.endpoint, [TOPIC]) as producer:
        producer.send(oc.message(TOPIC, b"changed-then-acked"))
    with oc.simple_consumer(broker.endpoint, GROUP, TOPIC) as consumer:
        (message,) = oc.receive_until(consumer, 1, invisible_s=2)
        consumer.change_invisible_duration(message, 3)
        consumer.ack(message)
        assert consumer.receive(16, 4) == []
