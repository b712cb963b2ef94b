"""kill -9 of the popack role and of the revive role: nothing is lost, duplicates are bounded.

Three role processes on one store. Each scenario pops a share of the messages
without acking all of them, kills a role with SIGKILL, restarts it, and drains
the topic with a fresh official consumer. Every sent message must be acked at
least once; a message is delivered again only if it was popped before the
crash (in flight), so duplicates are bounded by what was in flight.

``test_kill_a_role_while_producing_and_consuming`` kills the role while a
producer thread and a consumer thread (acking every other message) are running:
the clients of a killed popack fail and stop (a restarted popack has a new
port); those of a killed revive notice nothing. Every message whose send was
confirmed and whose ack was not is then delivered by the drain.
"""

from __future__ import annotations

import threading
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
MAX_LOAD_MESSAGES = 3_000  # bound of the producer thread in the under-load scenario


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


class _Traffic:
    """One producer and one consumer thread running until stopped or until the role dies."""

    def __init__(self, broker: BrokerProcess, *, invisible_s: int) -> None:
        self.sent: set[str] = set()
        self.acked: set[str] = set()
        self.popped = 0
        self.errors: list[str] = []
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._produce, args=(broker.endpoint,), daemon=True),
            threading.Thread(
                target=self._consume, args=(broker.endpoint, invisible_s), daemon=True
            ),
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def join(self) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout=60)
            assert not thread.is_alive(), "a traffic thread did not stop"

    def _produce(self, endpoint: str) -> None:
        try:
            with oc.producer(endpoint, [TOPIC]) as producer:
                for i in range(MAX_LOAD_MESSAGES):
                    if self.stop.is_set():
                        return
                    receipt = producer.send(oc.message(TOPIC, f"load-{i}".encode()))
                    with self._lock:
                        self.sent.add(receipt.message_id)
        except Exception as exc:  # noqa: BLE001 - the killed role: the thread stops here
            self.errors.append(f"producer: {exc!r}"[:200])

    def _consume(self, endpoint: str, invisible_s: int) -> None:
        try:
            with oc.simple_consumer(endpoint, GROUP, TOPIC, await_duration_s=1) as consumer:
                while not self.stop.is_set():
                    batch = consumer.receive(32, invisible_s)
                    with self._lock:
                        self.popped += len(batch)
                    for index, message in enumerate(batch):
                        if index % 2 == 0:
                            consumer.ack(message)
                            with self._lock:
                                self.acked.add(message.message_id)
        except Exception as exc:  # noqa: BLE001 - the killed role: the thread stops here
            self.errors.append(f"consumer: {exc!r}"[:200])

    def wait_until_flowing(self, *, sent: int, popped: int, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.sent) < sent or self.popped < popped:
            assert time.monotonic() < deadline, f"traffic did not flow: {self.errors}"
            assert not self.errors, f"traffic failed before the kill: {self.errors}"
            time.sleep(0.05)  # polling a condition with a deadline, not synchronising


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize(("role", "invisible_s"), [("popack", 10), ("revive", 2)])
def test_kill_a_role_while_producing_and_consuming(
    roles: BrokerProcess, role: str, invisible_s: int
) -> None:
    traffic = _Traffic(roles, invisible_s=invisible_s)
    traffic.start()
    traffic.wait_until_flowing(sent=200, popped=64)
    roles.kill(role)  # SIGKILL while sends, receives and acks are in flight
    roles.restart(role)
    traffic.join()
    if role == "revive":
        assert not traffic.errors, "clients noticed the revive crash"
    wanted = traffic.sent - traffic.acked
    delivered = _drain(roles, wanted)
    print(  # shown when the test fails
        f"{role}: sent {len(traffic.sent)}, acked {len(traffic.acked)}, popped {traffic.popped}, "
        f"drained {sum(delivered.values())} for {len(wanted)}; client errors {traffic.errors}"
    )
    assert wanted <= set(delivered), f"messages lost across the {role} crash"
    assert _duplicates(delivered, wanted) <= traffic.popped
