"""Helpers around the official ``rocketmq-python-client`` (used unmodified).

The client API is blocking; each helper bounds its waiting with a deadline.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)


def configuration(endpoint: str, *, request_timeout_s: int = 3) -> Any:
    return ClientConfiguration(endpoint, Credentials(), request_timeout=request_timeout_s)


@contextmanager
def producer(endpoint: str, topics: Sequence[str]) -> Iterator[Any]:
    client = Producer(configuration(endpoint), tuple(topics))
    client.startup()
    try:
        yield client
    finally:
        client.shutdown()


@contextmanager
def simple_consumer(
    endpoint: str, group: str, topic: str, *, await_duration_s: int = 3, tag: str = "*"
) -> Iterator[Any]:
    client = SimpleConsumer(
        configuration(endpoint),
        group,
        {topic: FilterExpression(tag)},
        await_duration=await_duration_s,
    )
    client.startup()
    try:
        yield client
    finally:
        client.shutdown()


def message(
    topic: str,
    body: bytes,
    *,
    tag: str | None = None,
    keys: Sequence[str] = (),
    message_group: str | None = None,
    properties: dict[str, str] | None = None,
) -> Any:
    msg = Message()
    msg.topic = topic
    msg.body = body
    if tag is not None:
        msg.tag = tag
    for key in keys:
        msg.keys = key
    if message_group is not None:
        msg.message_group = message_group
    for name, value in (properties or {}).items():
        msg.add_property(name, value)
    return msg


def receive_until(
    consumer: Any, count: int, *, invisible_s: int = 15, timeout_s: float = 30.0, batch: int = 16
) -> list[Any]:
    """Receive until ``count`` messages arrived (or the deadline passes)."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        got.extend(consumer.receive(batch, invisible_s))
    return got
