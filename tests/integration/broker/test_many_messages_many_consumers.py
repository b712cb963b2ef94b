"""Thousands of messages, four SimpleConsumers: every message acked exactly once, none lost.

The official producer sends one message per RPC, so the count is sized to stay
well inside the per-test timeout; the invisible time (60 s) is long enough that
no message is redelivered while the test runs, so "exactly once" is exact.

Like any application, the test retries a call the client reports as failed
(bounded). Under pytest on a loaded machine the official client occasionally
gets a burst of ``CANCELLED`` answers after ~1500 calls on one connection: the
broker's gRPC core resets those streams before the Python server ever sees
them (an open issue; not reproduced outside pytest). The client gives every
``send`` call a fresh message id, so a failed attempt that had been stored
after all would show up as an id that was never reported sent: the assertions
below would catch it.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest

from tests.integration.broker import officialclient as oc
from tests.integration.broker.conftest import GROUP, TOPIC
from tests.integration.broker.harness import BrokerProcess

MESSAGES = 2_000
CONSUMERS = 4
ATTEMPTS = 5

_T = TypeVar("_T")


def _retried(call: Callable[[], _T]) -> _T:
    for attempt in range(ATTEMPTS):
        try:
            return call()
        except Exception:
            if attempt == ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


@pytest.mark.slow
def test_every_message_acked_exactly_once(broker: BrokerProcess) -> None:
    with oc.producer(broker.endpoint, [TOPIC]) as producer:
        sent = {
            _retried(
                functools.partial(producer.send, oc.message(TOPIC, f"{i}".encode()))
            ).message_id
            for i in range(MESSAGES)
        }
    assert len(sent) == MESSAGES
    acked: list[str] = []
    lock = threading.Lock()
    deadline = time.monotonic() + 90

    def consume() -> None:
        with oc.simple_consumer(broker.endpoint, GROUP, TOPIC, await_duration_s=2) as consumer:
            while time.monotonic() < deadline:
                with lock:
                    if len(acked) >= MESSAGES:
                        return
                received: list[Any] = _retried(functools.partial(consumer.receive, 32, 60))
                for message in received:
                    _retried(functools.partial(consumer.ack, message))
                    with lock:
                        acked.append(message.message_id)

    with ThreadPoolExecutor(CONSUMERS) as pool:
        for future in [pool.submit(consume) for _ in range(CONSUMERS)]:
            future.result(timeout=120)
    assert len(acked) == MESSAGES  # no duplicates ...
    assert set(acked) == sent  # ... and nothing lost
