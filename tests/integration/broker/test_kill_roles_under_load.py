"""kill -9 of the popack role and of the revive role: nothing is lost, duplicates are bounded.

Three role processes on one store. Each scenario pops a share of the messages
without acking all of them, kills a role with SIGKILL, restarts it, and drains
the topic with a fresh official consumer. Every sent message must be acked at
least once; a message is delivered again only if it was popped before the
crash (in flight), so duplicates are bounded by what was in flight.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.broker import officialclient as oc
from tests.integration.broker.conftest import GROUP, GROUPS, TOPIC, TOPICS
from tests.integration.broker.harness import BrokerProcess

MESSAGES = 300


@pytest.fixture
def roles(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess.start(tmp_path / "broker", mode="roles", topics=TOPICS, groups=GROUPS)
    try:
        yield process
    finally:
        process.stop()
        print(process.logs())


def _send_all(broker: BrokerProcess) -> set[str]:
    with oc.producer(broker.endpoint, [TOPIC]) as producer:
        return {
            producer.send(oc.message(TOPIC, f"{i}".encode())).message_id for i in range(MESSAGES)
        }


def _pop_some(broker: BrokerProcess, *, invisible_s: int, ack_every: int) -> tuple[list[Any], int]:
    """Pop about half the messages; ack every ``ack_every``-th; return (acked, popped)."""
    acked: list[Any] = []
    popped = 0
    with oc.simple_consumer(broker.endpoint, GROUP, TOPIC) as consumer:
        while popped < MESSAGES // 2:
            batch = consumer.receive(32, invisible_s)
            for index, message in enumerate(batch):
                if index % ack_every == 0:
                    consumer.ack(message)
                    acked.append(message.message_id)
            popped += len(batch)
    return acked, popped


def _drain(broker: BrokerProcess, wanted: set[str], *, timeout_s: float = 60) -> Counter[str]:
    delivered: Counter[str] = Counter()
    deadline = time.monotonic() + timeout_s
    with oc.simple_consumer(broker.endpoint, GROUP, TOPIC) as consumer:
        while not wanted <= set(delivered) and time.monotonic() < deadline:
            for message in consumer.receive(32, 30):
                delivered[message.message_id] += 1
                consumer.ack(message)
    return delivered


def _duplicates(delivered: Counter[str], required: set[str]) -> int:
    """Deliveries beyond one per message that still needed one."""
    return sum(delivered.values()) - len(required)


@pytest.mark.slow
def test_kill_popack_loses_nothing(roles: BrokerProcess) -> None:
    sent = _send_all(roles)
    # 10 s invisible: the checkpoints sit in popack's in-memory buffer when it dies
    acked, popped = _pop_some(roles, invisible_s=10, ack_every=2)
    roles.kill("popack")
    roles.restart("popack")
    delivered = _drain(roles, sent - set(acked))
    assert sent - set(acked) <= set(delivered), "messages lost across the popack crash"
    assert _duplicates(delivered, sent - set(acked)) <= popped


@pytest.mark.slow
def test_kill_revive_loses_nothing(roles: BrokerProcess) -> None:
    sent = _send_all(roles)
    # 2 s invisible: the checkpoints are durable at once; revive dies before they are due
    acked, popped = _pop_some(roles, invisible_s=2, ack_every=3)
    roles.kill("revive")
    roles.restart("revive")
    delivered = _drain(roles, sent - set(acked))
    assert sent - set(acked) <= set(delivered), "messages lost across the revive crash"
    assert _duplicates(delivered, sent - set(acked)) <= popped
