"""The fact sheet's §9 upstream bug list as scenarios on the whole pure engine.

Items tested closer to one module live there, named with their upstream number:
#3/#4/#5/#6/#8/#10/#25 in test_revive_ledger.py, #9/#21/#3787 in
test_checkpoint_buffer_merge.py, #11/#12 in test_change_invisible_time.py, #16 in
test_pop_planning.py, #17/#18 in test_retry_and_dlq_targets.py, #22 in
test_allocate4pop.py, #24 in test_fifo_blocking.py. Not applicable at the pure
level: #14 (long-poll wake-ups) and #23 (LMQ).
"""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from popbroker.pop import checkpoints, orderinfo, popping, records
from popbroker.pop.checkpointbuffer import BufferSettings, CheckpointBuffer
from popbroker.pop.checkpoints import CheckpointKey, QueueKey
from popbroker.pop.reviving import ReviveLedger
from tests.unit.pop.popworld import RETRY, PopWorld


def _background(world: PopWorld) -> None:
    world.flush()
    world.complete_writes(0)
    world.commit()
    world.revive(0)


def _retried_ids(world: PopWorld) -> list[int]:
    return [message_id for message_id, _ in world.queues.get((RETRY, 0), [])]


def _pop_all(world: PopWorld, *, invisible_ms: int = 30_000) -> int:
    return world.pop(queue_id=0, max_messages=32, invisible_ms=invisible_ms, random_percent=50)


def test_1_acks_9_to_12_s_after_pop_cause_no_redelivery() -> None:
    world = PopWorld(strict=True)
    world.produce(6, 0)  # ids 1..4 match the filter (0 and 5 do not)
    _pop_all(world)
    world.now_ms += 9_000
    while world.in_flight:
        world.ack(0)
        world.now_ms += 1_000
        _background(world)  # the CK is flushed at 10 s; later acks become ACK records
    world.now_ms += 60_000
    _background(world)
    assert _retried_ids(world) == []


def test_2_ack_1_ms_before_deadline_never_redelivered_5_s_after_exactly_once() -> None:
    world = PopWorld()
    world.produce(3, 0)  # ids 1, 2
    _pop_all(world, invisible_ms=30_000)
    deadline_ms = world.now_ms + 30_000
    world.now_ms = deadline_ms - 1
    world.ack(0)  # id 1, just in time
    world.now_ms = deadline_ms + 5_000
    _background(world)  # id 2 revived
    world.ack(0)  # id 2, 5 s late: an orphan ack
    world.now_ms += 10**7
    _background(world)
    assert _retried_ids(world) == [2]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sets(st.integers(0, 31), max_size=32), min_size=1, max_size=6))
def test_7_random_ack_subsets_every_unacked_message_is_redelivered(
    acked_indexes: list[set[int]],
) -> None:
    world = PopWorld(strict=True)
    expected: list[int] = []
    for indexes in acked_indexes:
        world.produce(40, 0)
        _pop_all(world)
        batch = list(world.in_flight)
        world.in_flight = []
        for index, delivery in enumerate(batch):
            if index in indexes:
                world.in_flight = [delivery]
                world.ack(0)
            else:
                expected.append(delivery.message_id)
        world.now_ms += 1_000
        _background(world)
    world.now_ms += 10**6
    _background(world)
    assert sorted(_retried_ids(world)) == sorted(expected)


def test_9_pop_n_ack_n_minus_1_fast_last_after_flush_zero_redeliveries() -> None:
    world = PopWorld(strict=True)
    world.produce(12, 0)
    _pop_all(world, invisible_ms=60_000)
    while len(world.in_flight) > 1:
        world.ack(0)
    world.now_ms += 10_000
    world.flush()
    world.complete_writes(0)  # the CK is durable now, with n-1 bits set
    world.ack(0)  # written as an ACK record that carries bn
    acks = [records.decode(r.tag, r.body, revive_queue_id=0) for r in world.revive_log]
    assert all(isinstance(a, records.AckRecord) and a.broker_name for a in acks[1:])
    world.now_ms += 10**6
    _background(world)
    assert _retried_ids(world) == []


def test_13_never_acking_consumer_stops_at_the_inflight_threshold() -> None:
    counter = popping.InflightCounter()
    queue = QueueKey("orders", "billing", 0)
    popped = 0
    for start in range(0, 3200, 32):
        if counter.room(queue, 64, now_ms=0) == 0:
            break
        batch = CheckpointKey("orders", "billing", 0, start, 0, "b")
        counter.on_pop(batch, range(start, start + 32), until_ms=60_000)
        popped += 32
    assert popped == 64
    for offset in range(32):  # acks bring it back under
        counter.on_ack(CheckpointKey("orders", "billing", 0, 0, 0, "b"), offset)
    assert counter.room(queue, 64, now_ms=0) != 0
    counter.on_ack(CheckpointKey("orders", "billing", 0, 9_999, 0, "b"), 9_999)  # pre-restart
    assert counter.inflight(queue, now_ms=0) == 32
    assert counter.inflight(queue, now_ms=60_000) == 0  # past the deadline revive owns them


def test_15_fifo_queue_of_only_unmatched_messages_commits_to_max() -> None:
    committed = 0
    queue_max = 10_000
    while committed < queue_max:
        next_begin = min(queue_max, committed + 800)  # a scan matched nothing
        committed = orderinfo.commit_after_read(
            start_queue_offset=committed, next_begin_queue_offset=next_begin, found=False
        )
    assert committed == queue_max


def test_19_failed_revive_read_is_redelivered_later() -> None:
    world = PopWorld()
    world.produce(3, 0)
    _pop_all(world, invisible_ms=1_000)
    world.in_flight = []
    world.now_ms += 10_000
    world.complete_writes(0)
    world.revive((1 << 30) | 0xFFFFFF)  # every re-put fails
    assert _retried_ids(world) == []
    assert world.revive_offset == 0  # progress is not committed past the failed CK
    world.now_ms += 10_000
    world.revive(0)
    assert sorted(_retried_ids(world)) == [1, 2]


def test_20_many_change_invisible_calls_at_once_revive_keeps_up() -> None:
    ledger = ReviveLedger(revive_queue_id=0, local_broker_name="b", start_revive_queue_offset=0)
    started = time.perf_counter()
    position = 0
    for queue_offset in range(20_000):
        ck = checkpoints.Checkpoint(
            topic="t",
            group="g",
            queue_id=0,
            start_queue_offset=queue_offset,
            pop_time_ms=1_000,
            invisible_ms=5_000,
            revive_queue_id=0,
            broker_name="b",
            queue_offset_diffs=(0,),
        )
        ledger.observe_ck(ck, position)
        position += 1
        if queue_offset % 2:
            ledger.observe_ack(records.ack_for(ck.key, (queue_offset,)), position)
            position += 1
    tasks = ledger.due(10**9)
    for task in tasks:
        ledger.complete(task)
    assert len(tasks) == 10_000
    assert ledger.safe_revive_offset() == position
    assert time.perf_counter() - started < 5.0


def test_21_ck_writes_failing_keep_memory_bounded_and_offsets_recover() -> None:
    world = PopWorld()
    world.buffer = CheckpointBuffer(BufferSettings(max_tracked_cks=8, max_commit_queue_len=8))
    world.produce(400, 0)
    for _ in range(50):
        _pop_all(world)
        world.in_flight = []
        world.now_ms += 11_000
        world.flush()
        world.complete_writes(0x5555_5555_5555)  # every write fails
        world.commit()
    stats = world.buffer.stats()
    assert stats.in_memory + stats.writing <= 8
    assert world.committed.get(QueueKey("orders", "billing", 0)) is None
    world.now_ms += 11_000
    _background(world)
    assert world.committed[QueueKey("orders", "billing", 0)] > 0


def test_25_a_stalled_revive_still_redelivers_the_original_unacked_messages() -> None:
    world = PopWorld()
    world.produce(6, 0)
    _pop_all(world, invisible_ms=1_000)
    world.ack(1)
    world.in_flight = []
    world.now_ms += 5_000
    world.complete_writes(0)
    for _ in range(3):  # stuck: every attempt fails
        world.revive((1 << 30) | 0xFFFFFF)
        world.now_ms += 3600 * 1000
    world.revive(0)
    assert sorted(_retried_ids(world)) == [1, 3, 4]
