"""The official-client figure for popfleet: ``rocketmq-python-client`` used unmodified.

The official Python client sends one message per SendMessage and acks one message
per AckMessage. To give it its best showing we keep a window of 32 calls in
flight: 32 ``send_async`` futures, then wait for all; ``receive(32)``, then 32
``ack`` calls on a 32-thread pool, then wait for all (``SimpleConsumer.ack_async``
returns ``None`` in 5.1.2 instead of its future, so it cannot be waited on). The
figure so measures 32 concurrent single-message RPCs through the client, against
the batching generator's one 32-message RPC.

Its local-IP probe is pre-seeded with 127.0.0.1 before a client exists, so it
never touches a non-loopback address. Each phase runs in a spawned process.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rocketmq.v5.util.misc import Misc

Misc._Misc__LOCAL_IP = "127.0.0.1"

from rocketmq import (  # noqa: E402 - after the probe is seeded
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)

from bench.peers import workload  # noqa: E402

WINDOW = 32
REQUEST_TIMEOUT_S = 10


def _configuration(endpoint: str) -> Any:
    return ClientConfiguration(endpoint, Credentials(), request_timeout=REQUEST_TIMEOUT_S)


async def _produce(endpoint: str, topic: str, count: int, cap_s: float) -> tuple[int, float, bool]:
    producer = Producer(_configuration(endpoint), (topic,))
    producer.startup()
    try:
        sent = 0
        started = time.monotonic()
        deadline = started + cap_s
        while sent < count and time.monotonic() < deadline:
            futures = []
            for seq in range(sent, min(count, sent + WINDOW)):
                msg = Message()
                msg.topic = topic
                msg.body = workload.body(seq, time.monotonic_ns())
                futures.append(producer.send_async(msg))
            for future in futures:
                future.result(timeout=REQUEST_TIMEOUT_S * 4)
            sent += len(futures)
        return sent, time.monotonic() - started, sent < count
    finally:
        producer.shutdown()


async def _pop_ack(
    endpoint: str, topic: str, group: str, count: int, cap_s: float
) -> tuple[int, float, bool]:
    consumer = SimpleConsumer(
        _configuration(endpoint), group, {topic: FilterExpression("*")}, await_duration=1
    )
    consumer.startup()
    acks = ThreadPoolExecutor(max_workers=WINDOW, thread_name_prefix="ack")
    try:
        done = 0
        started = time.monotonic()
        deadline = started + cap_s
        while done < count and time.monotonic() < deadline:
            messages = consumer.receive(WINDOW, 60)
            for future in [acks.submit(consumer.ack, m) for m in messages]:
                future.result(timeout=REQUEST_TIMEOUT_S * 4)
            done += len(messages)
        return done, time.monotonic() - started, done < count
    finally:
        acks.shutdown(wait=True)
        consumer.shutdown()


def produce(endpoint: str, topic: str, *, count: int, cap_s: float = 60.0) -> workload.Rate:
    [(sent, elapsed, capped)] = workload.run_workers(
        [(_produce, (endpoint, topic, count, cap_s))], timeout_s=cap_s + 60
    )
    return workload.Rate(sent, elapsed, capped)


def pop_ack(
    endpoint: str, topic: str, group: str, *, count: int, cap_s: float = 60.0
) -> workload.Rate:
    [(done, elapsed, capped)] = workload.run_workers(
        [(_pop_ack, (endpoint, topic, group, count, cap_s))], timeout_s=cap_s + 60
    )
    return workload.Rate(done, elapsed, capped)
