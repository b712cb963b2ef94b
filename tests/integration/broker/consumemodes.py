"""Helpers of the consume-mode tests: a broker with its admin API, the real CLI, assignments.

The topic starts write-only, so that no PushConsumer is assigned anything
until all of them are registered; :func:`make_readable` (the real
``popfleet-admin``) then gives every consumer its final assignment at its
first refresh, with no stale receive from a transient assignment.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from bench.peers import pushworker
from bench.peers.pushfleet import PushFleet, wait_until
from popbroker.store.api import GroupConfig, Permission, TopicConfig
from popfleet_api import models
from popfleet_api.client import BrokerAdmin
from tests.integration.broker import officialclient as oc
from tests.integration.broker.harness import BrokerProcess

CLI = Path(sys.executable).with_name("popfleet-admin")
REFRESH_S = pushworker.ASSIGNMENT_REFRESH_S
MARGIN_S = 5.0  # scheduling slack on a loaded 2-core machine


@contextlib.contextmanager
def running_broker(work_dir: Path, *, topic: str, group: str) -> Iterator[BrokerProcess]:
    """``popbroker all`` with its admin API; ``topic`` has 2 queues and starts write-only."""
    process = BrokerProcess.start(
        work_dir,
        mode="all",
        topics=[TopicConfig(topic, 2, 2, perm=Permission.WRITE)],
        groups=[GroupConfig(group)],
        admin=True,
    )
    try:
        yield process
    finally:
        process.stop()
        print(process.logs())  # shown by pytest only when the test failed


@contextlib.contextmanager
def running_fleet(
    broker: BrokerProcess,
    work_dir: Path,
    *,
    topic: str,
    group: str,
    names: Sequence[str],
    processing_ms: float,
    threads: int,
    max_cache: int,
) -> Iterator[PushFleet]:
    """PushConsumer workers of ``group`` on ``topic`` (see :class:`PushFleet`)."""
    consumers = PushFleet(
        endpoint=broker.endpoint,
        group=group,
        topic=topic,
        work_dir=work_dir,
        names=names,
        processing_ms=processing_ms,
        threads=threads,
        max_cache=max_cache,
    )
    with consumers:
        try:
            yield consumers
        finally:
            print(consumers.logs())


def admin(broker: BrokerProcess, *args: str) -> None:
    """Run the real ``popfleet-admin`` against the broker's admin port; it must succeed."""
    done = subprocess.run(
        [str(CLI), "--timeout", "10", "--broker", f"127.0.0.1:{broker.admin_port}", *args],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, (done.stdout.decode(), done.stderr.decode())


def set_mode(broker: BrokerProcess, *, group: str, topic: str, mode: str, share: int = 0) -> None:
    admin(broker, "group", "set-mode", group, "--topic", topic, "--mode", mode,
          "--share", str(share))  # fmt: skip


def make_readable(broker: BrokerProcess, topic: str) -> None:
    admin(broker, "topic", "create", topic, "--queues", "2", "--perm", "rw")


def assignments(fleet: PushFleet) -> dict[str, list[int]]:
    """What the broker assigns to each consumer's client id right now."""
    return fleet.assignments()


Answers = dict[str, list[int]]


def wait_for_assignments(
    fleet: PushFleet, expected: Callable[[Answers], bool], *, what: str
) -> Answers:
    """Poll until ``expected(answers)`` (the broker's config and mode caches live ~1 s)."""
    wait_until(lambda: expected(assignments(fleet)), what=what, timeout_s=MARGIN_S)
    return assignments(fleet)


def offsets(broker: BrokerProcess, *, group: str, topic: str) -> dict[int, models.QueueOffsets]:
    """The group's offsets per queue of ``topic``, from the admin API."""

    async def read() -> models.GroupOffsets:
        async with BrokerAdmin(f"127.0.0.1:{broker.admin_port}") as client:
            return await client.offsets(group, [topic])

    loop = asyncio.new_event_loop()  # not asyncio.run: keep the main thread's current loop
    try:
        answer = loop.run_until_complete(read())
    finally:
        loop.close()
    return {q.queue_id: q for q in answer.queues if q.topic == topic}


def lag_by_queue(broker: BrokerProcess, *, group: str, topic: str) -> dict[int, int]:
    """Messages not consumed (max - committed queue offset, or min) per queue of ``topic``."""
    return {q: o.unconsumed_messages for q, o in offsets(broker, group=group, topic=topic).items()}


def wait_until_popping(broker: BrokerProcess, *, group: str, topic: str) -> None:
    """Until the group has popped every queue once (its offsets start at the queue's end then:
    a message sent earlier would be skipped, as RocketMQ's POP does for a new group)."""

    def initialised() -> bool:
        found = offsets(broker, group=group, topic=topic)
        return len(found) == 2 and all(o.committed_queue_offset is not None for o in found.values())

    wait_until(initialised, what="every queue popped once", timeout_s=REFRESH_S + MARGIN_S)


def wait_until_each_consumes(
    broker: BrokerProcess, fleet: PushFleet, *, topic: str, prefix: str
) -> set[str]:
    """Send one message at a time until every consumer of ``fleet`` has consumed one; return
    the bodies sent, once all of them are consumed (callers leave them out of what they check).

    :func:`wait_until_popping` is group-wide: it returns once *a* consumer popped, while
    another may not have asked for its assignment yet (each client refreshes on its own 5-s
    timer). A test that needs *every* consumer receiving — the hung one above all — waits here.
    Bounded by the deadline: at most one message per poll.
    """
    sent: list[str] = []

    def names_consumed() -> set[str]:
        return {m.name for m in fleet.consumed() if m.body.startswith(f"{prefix}-")}

    with oc.producer(broker.endpoint, [topic]) as producer:

        def everyone() -> bool:
            if names_consumed() >= set(fleet.names):
                return True
            body = f"{prefix}-{len(sent)}"
            producer.send(oc.message(topic, body.encode()))
            sent.append(body)
            return False

        wait_until(
            everyone,
            what="every consumer consumed a message",
            timeout_s=REFRESH_S + MARGIN_S,
            state=lambda: f"(consumed by {sorted(names_consumed())} of {len(sent)} sent)",
        )
    bodies = set(sent)
    wait_until(
        lambda: bodies <= {m.body for m in fleet.consumed()},
        what="every warm-up message consumed",
        timeout_s=MARGIN_S,
    )
    return bodies
