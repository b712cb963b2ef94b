"""10,000 messages, four SimpleConsumers: every message acked exactly once, none lost.

The official client runs here, in the test process; the broker runs in its own
processes (``popbroker all``, or store + popack + revive). The official producer
sends one message per RPC, so ``PRODUCERS`` threads share one producer to keep
the run short; its own retry policy (the backoff the broker's settings reply
gives it) is the only retrying. Consumers do not retry at all: a receive or an
ack that fails fails the test, so a broker that answers ``CANCELLED`` or misses
a client's deadline under load is caught here. The invisible time (60 s) is
longer than the run, so no message is redelivered and "exactly once" is exact.

Measured on the shared 2-core box: about 25-60 s per deployment.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.integration.broker import officialclient as oc
from tests.integration.broker.conftest import GROUP, TOPIC
from tests.integration.broker.harness import BrokerProcess

MESSAGES = 10_000
PRODUCERS = 4
CONSUMERS = 4
INVISIBLE_S = 60
CONSUME_DEADLINE_S = 120.0


def _send_all(broker: BrokerProcess) -> set[str]:
    sent: list[str] = []
    lock = threading.Lock()
    with oc.producer(broker.endpoint, [TOPIC]) as producer:

        def produce(first: int) -> None:
            for i in range(first, MESSAGES, PRODUCERS):
                receipt = producer.send(oc.message(TOPIC, f"{i}".encode()))
                with lock:
                    sent.append(receipt.message_id)

        with ThreadPoolExecutor(PRODUCERS) as pool:
            for future in [pool.submit(produce, k) for k in range(PRODUCERS)]:
                future.result()
    assert len(sent) == len(set(sent)) == MESSAGES
    return set(sent)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_every_message_acked_exactly_once(broker: BrokerProcess) -> None:
    started = time.monotonic()
    sent = _send_all(broker)
    acked: list[str] = []
    lock = threading.Lock()
    deadline = time.monotonic() + CONSUME_DEADLINE_S

    def consume() -> None:
        with oc.simple_consumer(broker.endpoint, GROUP, TOPIC, await_duration_s=2) as consumer:
            while time.monotonic() < deadline:
                with lock:
                    if len(acked) >= MESSAGES:
                        return
                received: list[Any] = consumer.receive(32, INVISIBLE_S)
                for message in received:
                    consumer.ack(message)
                    with lock:
                        acked.append(message.message_id)

    with ThreadPoolExecutor(CONSUMERS) as pool:
        for future in [pool.submit(consume) for _ in range(CONSUMERS)]:
            future.result()
    print(f"{MESSAGES} messages sent and acked in {time.monotonic() - started:.1f} s")
    assert len(acked) == MESSAGES  # no duplicates ...
    assert set(acked) == sent  # ... and nothing lost
