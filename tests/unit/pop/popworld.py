"""A small, pure simulation of one broker driving the POP core, for property tests.

This is test code: a list-backed store (queues, a revive log, a DLQ, committed
offsets) plus the glue a services layer would write around the pure core
(``CheckpointBuffer``, ``ReviveLedger``, ``popping``, ``invisibility``). Every
step is synchronous and driven by the test; ``crash()`` drops all in-memory
state and restarts from the persisted committed offsets and revive offset.

Messages are ``(message_id, reconsume_times)``; messages whose id is a multiple
of ``UNMATCHED_EVERY`` do not match the consumer's tag filter, so reads are
non-contiguous and some scans are empty ("just offset" entries).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from popbroker.pop import (
    checkpoints,
    invisibility,
    popping,
    receipts,
    records,
    retrytopics,
    reviving,
)
from popbroker.pop.checkpointbuffer import AckOutcome, Admission, CheckpointBuffer
from popbroker.pop.checkpoints import Checkpoint, CheckpointKey, QueueKey
from popbroker.pop.receipts import ReceiptHandle, TopicType

TOPIC = "orders"
GROUP = "billing"
BROKER = "broker-a"
RETRY = retrytopics.retry_topic(GROUP, TOPIC)
READ_QUEUE_NUM = 2
REVIVE_QUEUE_ID = 0
UNMATCHED_EVERY = 5
MAX_SCAN = 6
INVISIBLE_CHOICES_MS = (1_000, 5_000, 20_000, 60_000)

Message = tuple[int, int]  # (message id, reconsume times)


@dataclass
class Delivery:
    """A message in the client's hands."""

    handle: ReceiptHandle
    topic: str  # the real topic (retry topic for retried messages)
    message_id: int


@dataclass
class PopWorld:
    """Store + broker + one client (see the module docstring)."""

    now_ms: int = 1_000_000
    queues: dict[tuple[str, int], list[Message]] = field(default_factory=dict)
    revive_log: list[records.EncodedRecord] = field(default_factory=list)
    dlq: list[Message] = field(default_factory=list)
    committed: dict[QueueKey, int] = field(default_factory=dict)
    persisted_committed: dict[QueueKey, int] = field(default_factory=dict)
    revive_offset: int = 0
    persisted_revive_offset: int = 0
    next_message_id: int = 0
    acked_ids: set[int] = field(default_factory=set)
    in_flight: list[Delivery] = field(default_factory=list)
    request_seq: int = 0
    epoch_popped: set[tuple[str, int, int]] = field(default_factory=set)
    # With strict=True (no crashes, no CK write failures) a delivery acked before its
    # deadline must never be re-put: that would be a spurious redelivery.
    strict: bool = False
    acked_in_time: set[tuple[CheckpointKey, int]] = field(default_factory=set)
    reput: set[tuple[CheckpointKey, int]] = field(default_factory=set)
    # volatile (lost on crash)
    buffer: CheckpointBuffer = field(default_factory=CheckpointBuffer)
    ledger: reviving.ReviveLedger = field(
        default_factory=lambda: reviving.ReviveLedger(
            revive_queue_id=REVIVE_QUEUE_ID, local_broker_name=BROKER, start_revive_queue_offset=0
        )
    )
    pending_writes: list[Checkpoint] = field(default_factory=list)  # snapshots to append
    batches: dict[QueueKey, list[tuple[CheckpointKey | None, int]]] = field(default_factory=dict)
    dropped_keys: set[CheckpointKey] = field(default_factory=set)
    durable_keys: set[CheckpointKey] = field(default_factory=set)

    # -- producer ---------------------------------------------------------------------------

    def produce(self, count: int, queue_id: int) -> None:
        queue = self.queues.setdefault((TOPIC, queue_id % READ_QUEUE_NUM), [])
        for _ in range(count):
            queue.append((self.next_message_id, 0))
            self.next_message_id += 1

    def matched_ids(self) -> set[int]:
        return {i for i in range(self.next_message_id) if i % UNMATCHED_EVERY != 0}

    # -- pop --------------------------------------------------------------------------------

    def pop(
        self, *, queue_id: int, max_messages: int, invisible_ms: int, random_percent: int
    ) -> int:
        """One ReceiveMessage; returns how many messages were delivered."""
        self.request_seq += 1
        pop_time_ms = self.now_ms
        delivered = 0
        for visit in popping.plan_visits(
            topic=TOPIC,
            group=GROUP,
            queue_id=queue_id,
            read_queue_num=READ_QUEUE_NUM,
            random_percent=random_percent,
            fifo=False,
        ):
            want = popping.remaining_batch(max_messages, delivered)
            if want == 0:
                break
            delivered += self._pop_queue(visit, want, pop_time_ms, invisible_ms)
        return delivered

    def _pop_queue(
        self, visit: popping.QueueVisit, want: int, pop_time_ms: int, invisible_ms: int
    ) -> int:
        queue = self.queues.get((visit.topic, visit.queue_id), [])
        queue_key = QueueKey(visit.topic, GROUP, visit.queue_id)
        start = popping.pop_offset(
            committed_queue_offset=self.committed.get(queue_key),
            pop_cursor=self.buffer.latest_begin_offset(queue_key),
            init_queue_offset=popping.init_queue_offset(
                topic=visit.topic,
                init_mode=popping.InitMode.MAX,
                min_queue_offset=0,
                max_queue_offset=len(queue),
            ),
        ).queue_offset
        matched: list[int] = []
        scanned_end = start
        for queue_offset in range(start, min(len(queue), start + MAX_SCAN)):
            scanned_end = queue_offset + 1
            if visit.is_retry or queue[queue_offset][0] % UNMATCHED_EVERY != 0:
                matched.append(queue_offset)
                if len(matched) == want:
                    break
        if not matched:
            if scanned_end > start:
                self.buffer.add_just_offset(
                    queue_key, queue_offset=start, next_begin_queue_offset=scanned_end
                )
                self.batches.setdefault(queue_key, []).append((None, scanned_end))
            return 0
        revive_queue_id = REVIVE_QUEUE_ID
        ck = checkpoints.from_queue_offsets(
            matched,
            topic=visit.topic,
            group=GROUP,
            queue_id=visit.queue_id,
            start_queue_offset=start,
            pop_time_ms=pop_time_ms,
            invisible_ms=invisible_ms,
            revive_queue_id=revive_queue_id,
            broker_name=BROKER,
        )
        admission = self.buffer.add(ck, next_begin_queue_offset=scanned_end, now_ms=self.now_ms)
        if admission is Admission.REJECTED:
            return 0
        if admission is Admission.WRITE_NOW:
            self.pending_writes.append(ck)
        self.batches.setdefault(queue_key, []).append((ck.key, scanned_end))
        for queue_offset in matched:
            popped = (visit.topic, visit.queue_id, queue_offset)
            assert popped not in self.epoch_popped, f"in-flight offset handed out twice: {popped}"
            self.epoch_popped.add(popped)
            handle = ReceiptHandle(
                start_queue_offset=start,
                pop_time_ms=pop_time_ms,
                invisible_ms=invisible_ms,
                revive_queue_id=revive_queue_id,
                topic_type=TopicType.RETRY_V2 if visit.is_retry else TopicType.NORMAL,
                broker_name=BROKER,
                queue_id=visit.queue_id,
                queue_offset=queue_offset,
                physical_offset=queue_offset,
            )
            wire = receipts.encode(handle)  # what the client really holds
            decoded = receipts.decode(wire, now_ms=self.now_ms, expected_broker=BROKER)
            self.in_flight.append(Delivery(decoded, visit.topic, queue[queue_offset][0]))
        return len(matched)

    # -- client acks and changes ------------------------------------------------------------

    def ack(self, index: int) -> None:
        if not self.in_flight:
            return
        delivery = self.in_flight.pop(index % len(self.in_flight))
        key = invisibility.handle_key(delivery.handle, topic=delivery.topic, group=GROUP)
        outcome = self.buffer.ack(key, delivery.handle.queue_offset)
        if outcome in (AckOutcome.NOT_BUFFERED, AckOutcome.BAD_INDEX):
            self._append(records.ack_for(key, (delivery.handle.queue_offset,)))
        elif self.buffer.buffered(key) is None:
            self.dropped_keys.add(key)  # fully acked in memory: never written
        self.acked_ids.add(delivery.message_id)
        if self.now_ms < delivery.handle.next_visible_ms:
            self.acked_in_time.add((key, delivery.handle.queue_offset))
            if self.strict:
                assert (key, delivery.handle.queue_offset) not in self.reput, "revived too early"

    def change_invisible(self, index: int, invisible_ms: int) -> None:
        if not self.in_flight:
            return
        delivery = self.in_flight[index % len(self.in_flight)]
        queue = self.queues[(delivery.topic, delivery.handle.queue_id)]
        change = invisibility.plan_change(
            delivery.handle,
            topic=delivery.topic,
            group=GROUP,
            new_invisible_ms=invisible_ms,
            now_ms=self.now_ms,
            min_queue_offset=0,
            max_queue_offset=len(queue),
        )
        self._append(change.checkpoint)  # 1. the new CK is durable first
        outcome = self.buffer.ack(change.old_ack_key, change.queue_offset)  # 2. ack the old
        if outcome in (AckOutcome.NOT_BUFFERED, AckOutcome.BAD_INDEX):
            self._append(records.ack_for(change.old_ack_key, (change.queue_offset,)))
        elif self.buffer.buffered(change.old_ack_key) is None:
            self.dropped_keys.add(change.old_ack_key)
        delivery.handle = change.handle

    # -- popack background loops ------------------------------------------------------------

    def flush(self) -> None:
        self.pending_writes.extend(self.buffer.due_for_flush(self.now_ms))

    def complete_writes(self, outcome_bits: int) -> None:
        """Finish pending CK writes; 2 bits each: 0 ok, 1 failed, 2 written but reported failed."""
        writes, self.pending_writes = self.pending_writes, []
        for position, ck in enumerate(writes):
            key = ck.key
            if self.buffer.buffered(key) is None:
                continue
            outcome = outcome_bits >> (2 * position) & 3
            if outcome in (0, 2):
                self._append(ck)
            if outcome == 0:
                self.durable_keys.add(key)
                late_acks = self.buffer.mark_durable(key)
                if late_acks is not None:
                    self._append(late_acks)
            else:
                self.buffer.flush_failed(key, self.now_ms)
                if self.buffer.buffered(key) is None:
                    self.dropped_keys.add(key)

    def commit(self) -> None:
        for queue_key, committed in self.buffer.advance_commits().items():
            self._check_handed_off(queue_key, committed)
            if committed > self.committed.get(queue_key, -1):
                self.committed[queue_key] = committed

    def _check_handed_off(self, queue_key: QueueKey, committed: int) -> None:
        for key, next_begin in self.batches.get(queue_key, []):
            if next_begin > committed:
                break
            assert key is None or key in self.durable_keys or key in self.dropped_keys, (
                f"committed {committed} passes a batch that is not handed off: {key}"
            )

    def _append(self, record: records.Record) -> None:
        self.revive_log.append(records.encode(record))

    # -- revive -----------------------------------------------------------------------------

    def revive(self, failure_bits: int) -> None:
        ledger = self.ledger
        while ledger.scanned_end < len(self.revive_log) and ledger.has_capacity:
            position = ledger.scanned_end
            encoded = self.revive_log[position]
            record = records.decode(encoded.tag, encoded.body, revive_queue_id=REVIVE_QUEUE_ID)
            if isinstance(record, Checkpoint):
                ledger.observe_ck(record, position)
            else:
                ledger.observe_ack(record, position)
        for task_index, task in enumerate(ledger.due(self.now_ms)):
            succeeded: list[int] = []
            failed = False
            for offset_index, queue_offset in enumerate(task.queue_offsets):
                bit = failure_bits >> ((task_index * 7 + offset_index) % 24) & 1
                if bit and failure_bits & 1 << 30:
                    failed = True
                    continue
                if self._reput(task.checkpoint, queue_offset):
                    succeeded.append(queue_offset)
            if failed:
                ledger.fail(task, self.now_ms, succeeded_queue_offsets=tuple(succeeded))
            else:
                ledger.complete(task)
        self.revive_offset = ledger.safe_revive_offset()

    def _reput(self, ck: Checkpoint, queue_offset: int) -> bool:
        queue = self.queues.get((ck.topic, ck.queue_id), [])
        verdict = reviving.verify_revive_read(
            expected_queue_offset=queue_offset,
            min_queue_offset=0,
            max_queue_offset=len(queue),
            read_queue_offset=queue_offset if queue_offset < len(queue) else None,
        )
        assert verdict is reviving.ReadVerdict.REPUT
        if self.strict:
            assert (ck.key, queue_offset) not in self.acked_in_time, "spurious redelivery"
        self.reput.add((ck.key, queue_offset))
        message_id, reconsume_times = queue[queue_offset]
        target = retrytopics.retry_or_dlq(
            group=GROUP, topic=ck.topic, reconsume_times=reconsume_times
        )
        if target.dead_letter:
            self.dlq.append((message_id, target.reconsume_times))
        else:
            self.queues.setdefault((target.topic, target.queue_id), []).append(
                (message_id, target.reconsume_times)
            )
        return True

    # -- persistence and crashes ------------------------------------------------------------

    def persist(self) -> None:
        self.persisted_committed = dict(self.committed)
        self.persisted_revive_offset = self.revive_offset

    def crash(self) -> None:
        """Drop every in-memory structure; restart from what was persisted."""
        self.committed = dict(self.persisted_committed)
        self.revive_offset = self.persisted_revive_offset
        self.buffer = CheckpointBuffer()
        self.ledger = reviving.ReviveLedger(
            revive_queue_id=REVIVE_QUEUE_ID,
            local_broker_name=BROKER,
            start_revive_queue_offset=self.persisted_revive_offset,
        )
        self.pending_writes = []
        self.batches = {}
        self.epoch_popped = set()

    # -- the end: let time pass until everything is acked or dead-lettered ------------------

    def drain(self, *, max_rounds: int = 40) -> None:
        self.in_flight = []  # the client gives up on whatever it holds
        for _ in range(max_rounds):
            self.now_ms += 3 * 3600 * 1000
            self.flush()
            self.complete_writes(0)
            self.commit()
            self.revive(0)
            delivered = 1
            while delivered:
                delivered = self.pop(
                    queue_id=-1, max_messages=32, invisible_ms=60_000, random_percent=0
                )
                while self.in_flight:
                    self.ack(0)
            self.flush()
            self.complete_writes(0)
            self.commit()
            if self.ledger.stats().pending == 0 and not self._unread_backlog():
                return

    def _unread_backlog(self) -> bool:
        for (topic, queue_id), queue in self.queues.items():
            queue_key = QueueKey(topic, GROUP, queue_id)
            cursor = max(
                self.committed.get(queue_key, 0), self.buffer.latest_begin_offset(queue_key) or 0
            )
            if cursor < len(queue):
                return True
        return False

    def lost_ids(self) -> set[int]:
        dead = {message_id for message_id, _ in self.dlq}
        return self.matched_ids() - self.acked_ids - dead
