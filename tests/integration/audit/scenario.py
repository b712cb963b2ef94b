"""Drive a live broker into a known state and compute, independently, what the audits must say.

The scenario (revive role killed first, so nothing is ever revived):

  1. produce ``MESSAGES`` messages to a topic of ``QUEUES`` queues; the send
     receipts say which queue each landed on;
  2. pop a *short* set with a 2 s invisible time (its checkpoints are written
     to the revive log at once) and ack every other one (ACK records after the
     flushed CK);
  3. pop a *long* set with 1 h (checkpoints buffered in popack's memory) and
     ack every third one while buffered (merged into the CK's bitmap, written
     at the flush ~10 s later).

The truth comes from the client's side only: receipt handles (space-separated
``startOffset popTime invisibleTime reviveQid topicType brokerName queueId
queueOffset ...``) give each message's queue, offset and checkpoint identity;
send receipts give the per-queue message counts.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from popfleet_api import models
from popfleet_api.client import BrokerAdmin
from tests.integration.broker import officialclient as oc

TOPIC = "audited"
GROUP = "billing"
QUEUES = 2
MESSAGES = 40
SHORT_S = 2
LONG_S = 3_600  # never expires during the test, however slow the machine
GRACE_MS = 1_000
SETTLE_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class Popped:
    queue_id: int
    queue_offset: int
    start_queue_offset: int
    pop_time_ms: int
    invisible_ms: int

    @property
    def checkpoint(self) -> tuple[int, int, int]:
        return (self.queue_id, self.start_queue_offset, self.pop_time_ms)

    @property
    def revive_time_ms(self) -> int:
        return self.pop_time_ms + self.invisible_ms


def parse_handle(handle: str) -> Popped:
    fields = handle.split(" ")
    start, pop_time, invisible = int(fields[0]), int(fields[1]), int(fields[2])
    return Popped(
        queue_id=int(fields[6]),
        queue_offset=int(fields[7]),
        start_queue_offset=start,
        pop_time_ms=pop_time,
        invisible_ms=invisible,
    )


@dataclass
class Truth:
    produced: Counter[int] = field(default_factory=Counter)  # per queue id
    produced_from_ms: int = 0
    produced_until_ms: int = 0
    short: list[Popped] = field(default_factory=list)
    long: list[Popped] = field(default_factory=list)
    acked: set[tuple[int, int]] = field(default_factory=set)  # (queue id, offset)

    @property
    def popped(self) -> list[Popped]:
        return self.short + self.long

    def unacked(self, popped: list[Popped]) -> list[Popped]:
        return [p for p in popped if (p.queue_id, p.queue_offset) not in self.acked]

    def popped_per_queue(self) -> Counter[int]:
        return Counter(p.queue_id for p in self.popped)

    def lag(self, queue_id: int) -> int:
        return self.produced[queue_id] - self.popped_per_queue()[queue_id]

    def in_flight(self, queue_id: int) -> int:
        return sum(1 for p in self.unacked(self.long) if p.queue_id == queue_id)


def _pop(consumer: Any, truth: Truth, count: int, invisible_s: int, ack_every: int) -> list[Popped]:
    got = oc.receive_until(consumer, count, invisible_s=invisible_s, batch=count)
    popped = []
    for index, message in enumerate(got):
        entry = parse_handle(message.receipt_handle)
        popped.append(entry)
        if index % ack_every == 0:
            consumer.ack(message)
            truth.acked.add((entry.queue_id, entry.queue_offset))
    return popped


def drive(endpoint: str) -> Truth:
    truth = Truth(produced_from_ms=int(time.time() * 1000))
    with oc.producer(endpoint, [TOPIC]) as producer:
        for index in range(MESSAGES):
            receipt = producer.send(oc.message(TOPIC, f"m{index}".encode()))
            # The receipt's queue prints as <broker>.<topic>.<queue id> (no public accessor).
            truth.produced[int(str(receipt.message_queue).rsplit(".", 1)[1])] += 1
    truth.produced_until_ms = int(time.time() * 1000)
    with oc.simple_consumer(endpoint, GROUP, TOPIC) as consumer:
        truth.short = _pop(consumer, truth, 12, SHORT_S, ack_every=2)
        truth.long = _pop(consumer, truth, 12, LONG_S, ack_every=3)
    return truth


async def _settled(target: str, truth: Truth) -> bool:
    """Every popped message is in a CK of the log, committed offsets passed the pops, and the
    broker's clock is past the short CKs' revive time + grace."""
    async with BrokerAdmin(target) as admin:
        info = await admin.info()
        if info.now_ms <= max(p.revive_time_ms for p in truth.short) + GRACE_MS:
            return False
        offsets = await admin.offsets(GROUP, [TOPIC])
        committed = {
            q.queue_id: q.committed_queue_offset for q in offsets.queues if q.topic == TOPIC
        }
        if any(committed.get(q) != n for q, n in truth.popped_per_queue().items()):
            return False
        covered: set[tuple[int, int]] = set()
        for queue in range(info.revive_queue_num):
            async for page in admin.scan_revive_log(queue):
                for record in page.records:
                    if record.kind is models.ReviveRecordKind.CHECKPOINT and record.checkpoint:
                        ck = record.checkpoint
                        covered.update((ck.queue_id, o) for o in ck.queue_offsets)
        return all((p.queue_id, p.queue_offset) in covered for p in truth.popped)


def wait_settled(target: str, truth: Truth) -> None:
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while not asyncio.run(_settled(target, truth)):
        if time.monotonic() > deadline:
            raise TimeoutError("the broker did not settle (CKs flushed, offsets committed)")
        time.sleep(0.2)  # polling a condition with a deadline, not waiting for time
