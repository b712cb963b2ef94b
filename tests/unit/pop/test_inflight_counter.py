"""The in-flight guard's counter: per queue, per batch, until the batch's deadline."""

from __future__ import annotations

from popbroker.pop.checkpoints import CheckpointKey, QueueKey
from popbroker.pop.popping import InflightCounter

QUEUE = QueueKey("orders", "billing", 0)


def _batch(start: int, pop_time_ms: int = 1_000) -> CheckpointKey:
    return CheckpointKey("orders", "billing", 0, start, pop_time_ms, "broker-0")


def test_acks_are_idempotent_and_foreign_acks_change_nothing() -> None:
    counter = InflightCounter()
    counter.on_pop(_batch(0), [0, 1, 2], until_ms=10_000)
    counter.on_ack(_batch(0), 1)
    counter.on_ack(_batch(0), 1)  # the client retried its ack
    counter.on_ack(_batch(7), 7)  # popped before a restart: unknown here
    assert counter.inflight(QUEUE, now_ms=5_000) == 2


def test_a_batch_stops_counting_at_its_invisible_deadline() -> None:
    counter = InflightCounter()
    counter.on_pop(_batch(0), [0, 1], until_ms=10_000)
    counter.on_pop(_batch(2, pop_time_ms=4_000), [2, 3], until_ms=14_000)
    assert counter.inflight(QUEUE, now_ms=9_999) == 4
    assert counter.inflight(QUEUE, now_ms=10_000) == 2  # the first batch is revived
    assert counter.inflight(QUEUE, now_ms=14_000) == 0


def test_room_bounds_the_next_read_and_threshold_zero_disables_it() -> None:
    counter = InflightCounter()
    counter.on_pop(_batch(0), range(5), until_ms=10_000)
    assert counter.room(QUEUE, 8, now_ms=0) == 3
    counter.on_pop(_batch(5, pop_time_ms=2_000), range(5, 8), until_ms=10_000)
    assert counter.room(QUEUE, 8, now_ms=0) == 0  # no room: the pop skips the queue
    assert counter.room(QUEUE, 0, now_ms=0) is None
    counter.clear(QUEUE)
    assert counter.inflight(QUEUE, now_ms=0) == 0


def test_a_changed_invisible_time_moves_the_message_to_its_new_batch() -> None:
    counter = InflightCounter()
    counter.on_pop(_batch(0), [0, 1], until_ms=10_000)
    counter.on_ack(_batch(0), 1)  # the old handle is acked ...
    counter.on_pop(_batch(1, pop_time_ms=9_000), [1], until_ms=60_000)  # ... a new CK holds it
    assert counter.inflight(QUEUE, now_ms=20_000) == 1
