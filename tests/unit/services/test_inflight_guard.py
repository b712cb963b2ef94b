"""The in-flight guard in the pop: a queue hands out at most the threshold un-acked messages."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from popbroker.pop.checkpoints import QueueKey
from popbroker.services.popack import PopackServices
from popbroker.services.popattempt import PopRequest
from popbroker.services.routing import Endpoint
from popbroker.services.settings import PopackSettings
from tests.unit.services.conftest import GROUP, TOPIC, Broker

THRESHOLD = 3


@pytest.fixture
async def guarded(broker: Broker) -> Broker:
    """The same store and clock, with a popack role whose queues allow 3 in flight."""
    popack = await PopackServices.open(
        broker.store,
        advertised=Endpoint("127.0.0.1", 8082),
        settings=PopackSettings(config_ttl_ms=0, pop_inflight_threshold=THRESHOLD),
        clock=broker.clock,
        rng=random.Random(7),
    )
    return replace(broker, popack=popack)


def _pop_all_queues() -> PopRequest:
    return PopRequest(
        group=GROUP, topic=TOPIC, queue_id=-1, read_queue_num=2, max_messages=32,
        invisible_ms=10_000,
    )  # fmt: skip


async def test_a_queue_hands_out_at_most_the_threshold_and_then_says_it_skipped(
    guarded: Broker,
) -> None:
    for i in range(10):  # 5 per queue (round-robin over 2 queues)
        await guarded.send(f"m{i}".encode())
    first = await guarded.receive()
    assert len(first) == 2 * THRESHOLD  # fewer than asked: 3 per queue
    outcome = await guarded.popack.popper.pop(_pop_all_queues())
    assert outcome.messages == ()
    assert outcome.throttled == 2  # both queues skipped, and the pop says so
    assert outcome.rest_num >= 4  # their backlog still counts (wakes pollers later)
    for message in first[:2]:
        await guarded.ack(message)
        await guarded.ack(message)  # a repeated ack frees nothing more
    again = await guarded.receive()
    assert len(again) == 2  # exactly the room the two acks made


async def test_messages_past_their_invisible_deadline_stop_counting(guarded: Broker) -> None:
    for i in range(8):
        await guarded.send(f"m{i}".encode())
    assert len(await guarded.receive(invisible_ms=5_000)) == 2 * THRESHOLD
    assert await guarded.receive() == []
    guarded.clock.advance(5_000)  # the batches are due for revive: the queues have room
    assert len(await guarded.receive()) == 2


async def test_a_changed_invisible_time_keeps_the_message_counted(guarded: Broker) -> None:
    for i in range(3):
        await guarded.send(f"m{i}".encode(), message_id=f"id-{i}")
    got = await guarded.receive(invisible_ms=5_000)
    target = got[0]
    await guarded.popack.acker.change_invisible(
        group=GROUP, topic=TOPIC, receipt_handle=target.receipt_handle, invisible_ms=60_000
    )
    guarded.clock.advance(5_000)  # the original batches expired, the changed one did not
    outcome = await guarded.popack.popper.pop(_pop_all_queues())
    assert outcome.throttled == 0
    queue = QueueKey(TOPIC, GROUP, target.stored.queue_id)
    assert guarded.popack.state.inflight.inflight(queue, guarded.clock()) == 1
