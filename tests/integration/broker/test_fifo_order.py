"""FIFO: per message group order holds under concurrent consumers."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

from tests.integration.broker import officialclient as oc
from tests.integration.broker.conftest import FIFO_GROUP, FIFO_TOPIC
from tests.integration.broker.harness import WITH_FRONT, BrokerProcess

BROKER_MODES = WITH_FRONT  # also behind popfront (conftest)


GROUPS = ("g-a", "g-b", "g-c", "g-d")
PER_GROUP = 12


def test_fifo_order_per_message_group(broker: BrokerProcess) -> None:
    with oc.producer(broker.endpoint, [FIFO_TOPIC]) as producer:
        for i in range(PER_GROUP):
            for group in GROUPS:
                producer.send(oc.message(FIFO_TOPIC, f"{group}:{i}".encode(), message_group=group))
    seen: dict[str, list[int]] = defaultdict(list)
    lock = threading.Lock()
    total = len(GROUPS) * PER_GROUP
    deadline = time.monotonic() + 60
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            with oc.simple_consumer(broker.endpoint, FIFO_GROUP, FIFO_TOPIC) as consumer:
                while time.monotonic() < deadline:
                    with lock:
                        if sum(len(v) for v in seen.values()) >= total:
                            return
                    for m in consumer.receive(4, 10):
                        group, index = m.body.decode().split(":")
                        assert m.message_group == group
                        with lock:
                            seen[group].append(int(index))
                        consumer.ack(m)
        except Exception as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=consume) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    assert not errors, errors
    assert set(seen) == set(GROUPS)
    for group in GROUPS:
        assert seen[group] == list(range(PER_GROUP)), (group, seen[group])
