"""Switching a group PULL -> POP (share 0) -> POP (share 1) under four live PushConsumers.

DESIGN §3.3 through the official client: four unmodified ``PushConsumer``
processes (:mod:`bench.peers.pushworker`) of one group on a 2-queue topic, a
real ``popbroker all``, and the real ``popfleet-admin`` CLI for the switch.

* PULL: each queue has exactly one consumer, two consumers get nothing — in
  the broker's ``QueryAssignment`` answers and in what each consumer receives.
* ``set-mode --mode POP --share 0``: every client is assigned queue -1, and
  within one assignment refresh of the client (:data:`REFRESH_S`) all four
  receive.
* ``--share 1``: each queue is assigned to, and received by, exactly two
  consumers, and no consumer receives from a queue it is not assigned.

The topic starts write-only, so no consumer is assigned anything until all
four are registered; making it readable then gives every consumer its final
PULL assignment at its first refresh. Consumers process slowly (20 ms, one
thread, a cache of 8 messages), so a steady stream needs all of them.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.peers import pushfleet
from bench.peers.pushfleet import PushFleet, wait_until
from tests.integration.broker import officialclient as oc
from tests.integration.broker.consumemodes import (
    MARGIN_S,
    REFRESH_S,
    assignments,
    make_readable,
    running_broker,
    running_fleet,
    set_mode,
    wait_for_assignments,
    wait_until_popping,
)
from tests.integration.broker.harness import BrokerProcess

TOPIC = "switch"
GROUP = "switchers"
NAMES = ("c0", "c1", "c2", "c3")
SEND_EVERY_S = 0.05


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
        processing_ms=20,
        threads=1,
        max_cache=8,
    ) as consumers:
        yield consumers


def consumers_by_queue(fleet: PushFleet, prefix: str) -> dict[int, set[str]]:
    by_queue: dict[int, set[str]] = defaultdict(set)
    for message in fleet.consumed():
        if message.body.startswith(prefix):
            by_queue[message.queue].add(message.name)
    return dict(by_queue)


def receivers(fleet: PushFleet, prefix: str) -> set[str]:
    return {m.name for m in fleet.consumed() if m.body.startswith(prefix)}


def consumed_bodies(fleet: PushFleet, prefix: str) -> set[str]:
    return {m.body for m in fleet.consumed() if m.body.startswith(prefix)}


def send_until(producer: object, prefix: str, done: object, *, timeout_s: float) -> int:
    """Send ``prefix-i`` every SEND_EVERY_S until ``done()``; returns how many were sent."""
    sent = 0
    deadline = time.monotonic() + timeout_s
    next_send = time.monotonic()
    while not done():  # type: ignore[operator]
        now = time.monotonic()
        if now > deadline:
            raise TimeoutError(f"{prefix}: condition not met within {timeout_s:.1f} s")
        if now >= next_send:
            producer.send(oc.message(TOPIC, f"{prefix}-{sent}".encode()))  # type: ignore[attr-defined]
            sent += 1
            next_send = now + SEND_EVERY_S
        else:
            time.sleep(min(pushfleet.POLL_S, next_send - now))
    return sent


def drain(fleet: PushFleet, prefix: str, sent: int) -> None:
    expected = {f"{prefix}-{i}" for i in range(sent)}
    wait_until(
        lambda: expected <= consumed_bodies(fleet, prefix),
        what=f"every {prefix} message consumed",
        timeout_s=REFRESH_S + 4 * MARGIN_S,
    )


@pytest.mark.timeout(300)
def test_pull_then_pop_share_0_then_share_1(admin_broker: BrokerProcess, fleet: PushFleet) -> None:
    make_readable(admin_broker, TOPIC)
    with oc.producer(admin_broker.endpoint, [TOPIC]) as producer:
        # -- PULL: each queue exactly one consumer, two consumers idle
        pull = wait_for_assignments(fleet, lambda a: any(a.values()), what="a PULL assignment")
        owners = {queue: name for name, queues in pull.items() for queue in queues}
        assert sorted(q for queues in pull.values() for q in queues) == [0, 1], pull
        assert sorted(len(queues) for queues in pull.values()) == [0, 0, 1, 1], pull
        wait_until_popping(admin_broker, group=GROUP, topic=TOPIC)
        for i in range(40):  # the producer round-robins the two queues
            producer.send(oc.message(TOPIC, f"pull-{i}".encode()))
        drain(fleet, "pull", 40)
        assert consumers_by_queue(fleet, "pull") == {0: {owners[0]}, 1: {owners[1]}}

        # -- POP, share 0: every client pops every queue; all four receive within a refresh
        set_mode(admin_broker, group=GROUP, topic=TOPIC, mode="POP", share=0)
        wait_for_assignments(
            fleet, lambda a: a == {name: [-1] for name in NAMES}, what="queue -1 for everyone"
        )
        sent = send_until(producer, "share0", lambda: receivers(fleet, "share0") == set(NAMES),
                          timeout_s=REFRESH_S + MARGIN_S)  # fmt: skip
        drain(fleet, "share0", sent)

        # -- POP, share 1: each queue assigned to, and received by, exactly two consumers
        set_mode(admin_broker, group=GROUP, topic=TOPIC, mode="POP", share=1)
        share1 = wait_for_assignments(
            fleet, lambda a: all(q in ([0], [1]) for q in a.values()), what="one queue each"
        )
        sharers: dict[int, set[str]] = defaultdict(set)
        for name, (queue,) in share1.items():
            sharers[queue].add(name)
        assert {q: len(names) for q, names in sharers.items()} == {0: 2, 1: 2}, share1
        sent = send_until(producer, "share1", lambda: receivers(fleet, "share1") == set(NAMES),
                          timeout_s=REFRESH_S + 2 * MARGIN_S)  # fmt: skip
        drain(fleet, "share1", sent)
        assert consumers_by_queue(fleet, "share1") == dict(sharers), [
            (m.name, m.queue, m.body) for m in fleet.consumed() if m.body.startswith("share1")
        ]
        assert assignments(fleet) == share1  # nothing moved while they consumed
