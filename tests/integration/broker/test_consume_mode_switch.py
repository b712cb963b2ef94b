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

import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.peers import pushfleet, pushworker
from bench.peers.pushfleet import PushFleet, wait_until
from popbroker.store.api import GroupConfig, Permission, TopicConfig
from tests.integration.broker import officialclient as oc
from tests.integration.broker.harness import BrokerProcess

TOPIC = "switch"
GROUP = "switchers"
NAMES = ("c0", "c1", "c2", "c3")
REFRESH_S = pushworker.ASSIGNMENT_REFRESH_S
MARGIN_S = 5.0  # scheduling slack on a loaded 2-core machine
SEND_EVERY_S = 0.05
CLI = Path(sys.executable).with_name("popfleet-admin")


@pytest.fixture
def admin_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess.start(
        tmp_path / "broker",
        mode="all",
        topics=[TopicConfig(TOPIC, 2, 2, perm=Permission.WRITE)],
        groups=[GroupConfig(GROUP)],
        admin=True,
    )
    try:
        yield process
    finally:
        process.stop()
        print(process.logs())


@pytest.fixture
def fleet(admin_broker: BrokerProcess, tmp_path: Path) -> Iterator[PushFleet]:
    consumers = PushFleet(
        endpoint=admin_broker.endpoint,
        group=GROUP,
        topic=TOPIC,
        work_dir=tmp_path / "consumers",
        names=NAMES,
        processing_ms=20,
        threads=1,
        max_cache=8,
    )
    with consumers:
        try:
            yield consumers
        finally:
            print(consumers.logs())


def admin(broker: BrokerProcess, *args: str) -> None:
    """Run the real ``popfleet-admin`` against the broker's admin port."""
    done = subprocess.run(
        [str(CLI), "--timeout", "10", "--broker", f"127.0.0.1:{broker.admin_port}", *args],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, (done.stdout.decode(), done.stderr.decode())


def assignments(fleet: PushFleet) -> dict[str, list[int]]:
    return {
        name: pushfleet.query_assignment(
            fleet.endpoint, topic=TOPIC, group=GROUP, client_id=fleet.client_id(name)
        )
        for name in fleet.names
    }


def consumers_by_queue(fleet: PushFleet, prefix: str) -> dict[int, set[str]]:
    by_queue: dict[int, set[str]] = defaultdict(set)
    for message in fleet.consumed():
        if message.body.startswith(prefix):
            by_queue[message.queue].add(message.name)
    return dict(by_queue)


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
    admin(admin_broker, "topic", "create", TOPIC, "--queues", "2", "--perm", "rw")
    with oc.producer(admin_broker.endpoint, [TOPIC]) as producer:
        # -- PULL: each queue exactly one consumer, two consumers idle
        wait_until(  # the broker's configuration cache sees the readable topic within its TTL
            lambda: any(assignments(fleet).values()), what="a PULL assignment", timeout_s=MARGIN_S
        )
        pull = assignments(fleet)
        owners = {queue: name for name, queues in pull.items() for queue in queues}
        assert sorted(q for queues in pull.values() for q in queues) == [0, 1], pull
        assert sorted(len(queues) for queues in pull.values()) == [0, 0, 1, 1], pull
        for i in range(40):  # the producer round-robins the two queues
            producer.send(oc.message(TOPIC, f"pull-{i}".encode()))
        drain(fleet, "pull", 40)
        assert consumers_by_queue(fleet, "pull") == {0: {owners[0]}, 1: {owners[1]}}

        # -- POP, share 0: every client pops every queue; all four receive within a refresh
        admin(admin_broker, "group", "set-mode", GROUP, "--topic", TOPIC, "--mode", "POP",
              "--share", "0")  # fmt: skip
        wait_until(  # the broker reads consume modes at most every second
            lambda: assignments(fleet) == {name: [-1] for name in NAMES},
            what="every client assigned queue -1",
            timeout_s=MARGIN_S,
        )
        sent = send_until(
            producer,
            "share0",
            lambda: {m.name for m in fleet.consumed() if m.body.startswith("share0")} == set(NAMES),
            timeout_s=REFRESH_S + MARGIN_S,
        )
        drain(fleet, "share0", sent)

        # -- POP, share 1: each queue assigned to, and received by, exactly two consumers
        admin(admin_broker, "group", "set-mode", GROUP, "--topic", TOPIC, "--mode", "POP",
              "--share", "1")  # fmt: skip
        wait_until(
            lambda: all(q in ([0], [1]) for q in assignments(fleet).values()),
            what="one queue per client",
            timeout_s=MARGIN_S,
        )
        share1 = assignments(fleet)
        sharers: dict[int, set[str]] = defaultdict(set)
        for name, queues in share1.items():
            assert len(queues) == 1, share1
            sharers[queues[0]].add(name)
        assert {q: len(names) for q, names in sharers.items()} == {0: 2, 1: 2}, share1
        sent = send_until(
            producer,
            "share1",
            lambda: {m.name for m in fleet.consumed() if m.body.startswith("share1")} == set(NAMES),
            timeout_s=REFRESH_S + 2 * MARGIN_S,
        )
        drain(fleet, "share1", sent)
        assert consumers_by_queue(fleet, "share1") == dict(sharers), [
            (m.name, m.queue, m.body) for m in fleet.consumed() if m.body.startswith("share1")
        ]
