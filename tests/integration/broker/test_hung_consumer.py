"""A hung PushConsumer (pops, never acks, keeps heartbeating): PULL stalls its queue, POP does not.

DESIGN §3.3, the seeds' headline claim, through three unmodified official
``PushConsumer`` processes on a 2-queue topic against a real ``popbroker
all``. The hung consumer's listener never returns: it holds what it popped
(every consumer caches at most 4 messages and has 4 consumption threads, so
the hung one stops receiving after 4 and each of them reaches its listener:
the test knows exactly what it holds) and its client keeps heartbeating, so
the broker still counts it as live.

* PULL: the hung consumer keeps its queue. The other queue — the same number
  of messages, the broker alternates the queues — is drained by its owner,
  while no message of the hung queue reaches anyone: only the hung consumer's
  few are in flight, the rest never popped. The window
  is bounded by the broker's invisible time for push consumers
  (``PopackSettings.default_invisible_ms``): the test asserts it ended before
  even the popped messages could have come back.
* POP (share 0): once each consumer has consumed a warm-up message (so the hung
  one is receiving: with share 0 whoever is parked takes a round), the two
  healthy consumers drain both queues; the messages the hung consumer popped
  come back after the invisible time (from the retry
  topic, delivery attempt 2) and are consumed by the others.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.peers.pushfleet import PushFleet, wait_until
from popbroker.services.settings import PopackSettings
from tests.integration.broker import officialclient as oc
from tests.integration.broker.consumemodes import (
    MARGIN_S,
    REFRESH_S,
    assignments,
    make_readable,
    offsets,
    running_broker,
    running_fleet,
    set_mode,
    wait_for_assignments,
    wait_until_each_consumes,
    wait_until_popping,
)
from tests.integration.broker.harness import BrokerProcess

TOPIC = "hung"
GROUP = "hangers"
NAMES = ("c0", "c1", "c2")
PER_QUEUE = 20
HELD = 4  # cache and consumption threads of every consumer: all a hung one pops reaches it
INVISIBLE_S = PopackSettings().default_invisible_ms / 1000  # push consumers send none
REVIVE_LATENESS_S = 1.0  # DESIGN §3.2 target


@pytest.fixture
def admin_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path / "broker", topic=TOPIC, group=GROUP) as process:
        yield process


@pytest.fixture
def fleet(admin_broker: BrokerProcess, tmp_path: Path) -> Iterator[PushFleet]:
    with running_fleet(
        admin_broker,
        tmp_path / "consumers",
        topic=TOPIC,
        group=GROUP,
        names=NAMES,
        processing_ms=5,
        threads=HELD,
        max_cache=HELD,
    ) as consumers:
        yield consumers


def send_round(broker: BrokerProcess, prefix: str) -> set[str]:
    """2 * PER_QUEUE messages; the broker spreads them over the queues (the client names none)."""
    bodies = {f"{prefix}-{i}" for i in range(2 * PER_QUEUE)}
    with oc.producer(broker.endpoint, [TOPIC]) as producer:
        for body in sorted(bodies):
            producer.send(oc.message(TOPIC, body.encode()))
    return bodies


def consumed(fleet: PushFleet, bodies: set[str]) -> set[str]:
    return {m.body for m in fleet.consumed() if m.body in bodies}


def by_consumer(fleet: PushFleet, bodies: set[str]) -> str:
    """How many of ``bodies`` each consumer processed: the state a failed wait reports."""
    counts = {name: 0 for name in fleet.names}
    for m in fleet.consumed():
        if m.body in bodies:
            counts[m.name] += 1
    return f"(processed of {len(bodies)}: {counts})"


@pytest.mark.timeout(180)
def test_pull_hung_consumer_stalls_its_queue(admin_broker: BrokerProcess, fleet: PushFleet) -> None:
    make_readable(admin_broker, TOPIC)
    pull = wait_for_assignments(fleet, lambda a: any(a.values()), what="a PULL assignment")
    owners = {queue: name for name, queues in pull.items() for queue in queues}
    hung, healthy = owners[0], owners[1]
    wait_until_popping(admin_broker, group=GROUP, topic=TOPIC)
    fleet.hang(hung)
    started = time.monotonic()

    send_round(admin_broker, "first")
    wait_until(lambda: bool(fleet.hung_bodies(hung)), what="the hung consumer popped",
               timeout_s=REFRESH_S + MARGIN_S)  # fmt: skip
    send_round(admin_broker, "second")  # arrives after the hung consumer stopped receiving

    def healthy_drained() -> bool:
        queue = offsets(admin_broker, group=GROUP, topic=TOPIC)[1]
        committed = queue.committed_queue_offset == queue.max_queue_offset
        processed = {m.body for m in fleet.consumed() if m.queue == 1 and not m.retry}
        return committed and len(processed) == queue.max_queue_offset

    wait_until(healthy_drained, what="the healthy queue drained by its owner",
               timeout_s=REFRESH_S + 4 * MARGIN_S)  # fmt: skip
    window_s = time.monotonic() - started

    assert window_s < INVISIBLE_S, "window too long to tell a stall from a redelivery"
    assert {(m.name, m.queue) for m in fleet.consumed()} == {(healthy, 1)}
    stalled = offsets(admin_broker, group=GROUP, topic=TOPIC)[0]
    held = fleet.hung_bodies(hung)
    assert 1 <= len(held) <= HELD
    assert stalled.committed_queue_offset is not None
    assert stalled.committed_queue_offset <= len(held)  # never past what the hung one popped
    assert stalled.max_queue_offset - len(held) >= 2 * PER_QUEUE - HELD
    assert stalled.unconsumed_messages >= stalled.max_queue_offset - len(
        held
    )  # the rest: never popped
    assert assignments(fleet)[hung] == [0]  # still heartbeating: still the queue's owner


@pytest.mark.timeout(int(INVISIBLE_S) + 150)
def test_pop_others_drain_and_revived_messages_come_back(
    admin_broker: BrokerProcess, fleet: PushFleet
) -> None:
    set_mode(admin_broker, group=GROUP, topic=TOPIC, mode="POP", share=0)
    make_readable(admin_broker, TOPIC)
    wait_for_assignments(
        fleet, lambda a: a == {name: [-1] for name in NAMES}, what="queue -1 for everyone"
    )
    wait_until_popping(admin_broker, group=GROUP, topic=TOPIC)  # before the warm-up is sent
    # Every consumer receiving before the hang: with share 0 whoever is parked takes the round,
    # so a consumer still waiting for its first assignment refresh would pop none of it.
    wait_until_each_consumes(admin_broker, fleet, topic=TOPIC, prefix="warm")
    hung = NAMES[0]
    fleet.hang(hung)

    everything = send_round(admin_broker, "first")
    wait_until(lambda: bool(fleet.hung_bodies(hung)), what="the hung consumer popped",
               timeout_s=MARGIN_S, state=lambda: by_consumer(fleet, everything))  # fmt: skip
    popped_at = time.monotonic()
    wait_until(
        lambda: consumed(fleet, everything) >= everything - set(fleet.hung_bodies(hung)),
        what="both queues drained by the healthy consumers",
        timeout_s=REFRESH_S + 4 * MARGIN_S,
    )
    drained_s = time.monotonic() - popped_at
    assert drained_s < INVISIBLE_S  # drained long before anything could be redelivered
    held = set(fleet.hung_bodies(hung))
    assert 1 <= len(held) <= HELD
    assert not held & consumed(fleet, everything)  # nothing it holds was delivered twice yet

    wait_until(
        lambda: consumed(fleet, everything) == everything,
        what="the hung consumer's messages revived and consumed",
        timeout_s=INVISIBLE_S + REVIVE_LATENESS_S + 4 * MARGIN_S,
    )
    messages = [m for m in fleet.consumed() if m.body in everything]
    assert {m.name for m in messages} <= set(NAMES) - {hung}
    revived = {m.body for m in messages if m.attempt >= 2}
    assert revived == held  # exactly what the hung listener held came back, once more
    assert all(m.retry for m in messages if m.attempt >= 2)  # from the group's retry topic
    assert {m.queue for m in messages if not m.retry} == {0, 1}
