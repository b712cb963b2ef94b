"""Checkpoint buffer: admission, ack merge, flush timing, late bits, bounds."""

from __future__ import annotations

from popbroker.pop import checkpoints
from popbroker.pop.checkpointbuffer import (
    AckOutcome,
    Admission,
    BufferSettings,
    CheckpointBuffer,
)
from popbroker.pop.checkpoints import Checkpoint, QueueKey

QUEUE = QueueKey("orders", "billing", 0)


def _ck(
    start: int, count: int = 3, *, pop_time_ms: int = 0, invisible_ms: int = 60_000
) -> Checkpoint:
    return Checkpoint(
        topic="orders",
        group="billing",
        queue_id=0,
        start_queue_offset=start,
        pop_time_ms=pop_time_ms,
        invisible_ms=invisible_ms,
        revive_queue_id=0,
        broker_name="broker-a",
        queue_offset_diffs=tuple(range(count)),
    )


def test_fully_acked_ck_is_dropped_and_never_written() -> None:
    buffer = CheckpointBuffer()
    ck = _ck(0)
    assert buffer.add(ck, next_begin_queue_offset=3, now_ms=0) is Admission.BUFFERED
    for queue_offset in (0, 1, 2):
        assert buffer.ack(ck.key, queue_offset) is AckOutcome.MERGED
    assert buffer.buffered(ck.key) is None
    assert buffer.due_for_flush(10**9) == []
    assert buffer.advance_commits() == {QUEUE: 3}


def test_ack_outcomes() -> None:
    buffer = CheckpointBuffer()
    ck = _ck(0)
    buffer.add(ck, next_begin_queue_offset=3, now_ms=0)
    assert buffer.ack(ck.key, 1) is AckOutcome.MERGED
    assert buffer.ack(ck.key, 1) is AckOutcome.ALREADY_ACKED
    assert buffer.ack(ck.key, 9) is AckOutcome.BAD_INDEX
    assert buffer.ack(_ck(50).key, 50) is AckOutcome.NOT_BUFFERED


def test_flush_when_stay_time_passes_with_bitmap_known_in_memory() -> None:
    buffer = CheckpointBuffer(BufferSettings(ck_stay_ms=10_000, ck_flush_ahead_ms=3_000))
    ck = _ck(0, pop_time_ms=1_000)
    buffer.add(ck, next_begin_queue_offset=3, now_ms=1_000)
    buffer.ack(ck.key, 0)
    assert buffer.due_for_flush(10_999) == []
    (flushed,) = buffer.due_for_flush(11_000)
    assert flushed.ack_bitmap == 0b001
    assert buffer.advance_commits() == {}  # not durable yet
    assert buffer.mark_durable(ck.key) is None  # no late bits
    assert buffer.advance_commits() == {QUEUE: 3}


def test_flush_ahead_of_revive_time() -> None:
    buffer = CheckpointBuffer(BufferSettings(ck_stay_ms=60_000, ck_flush_ahead_ms=3_000))
    ck = _ck(0, invisible_ms=8_000)
    assert buffer.add(ck, next_begin_queue_offset=3, now_ms=0) is Admission.BUFFERED
    assert buffer.due_for_flush(4_999) == []
    assert buffer.due_for_flush(5_000) == [ck]


def test_short_invisible_time_is_written_now() -> None:
    buffer = CheckpointBuffer()
    ck = _ck(0, invisible_ms=4_000)  # < 3 s flush-ahead + 1.5 s margin
    assert buffer.add(ck, next_begin_queue_offset=3, now_ms=0) is Admission.WRITE_NOW
    assert buffer.due_for_flush(10**9) == []  # the caller writes it, not the flusher
    assert buffer.mark_durable(ck.key) is None
    assert buffer.advance_commits() == {QUEUE: 3}


def test_disabled_buffer_writes_every_ck_now() -> None:
    buffer = CheckpointBuffer(BufferSettings(enabled=False))
    assert buffer.add(_ck(0), next_begin_queue_offset=3, now_ms=0) is Admission.WRITE_NOW


def test_acks_merged_while_writing_come_back_as_one_ack_record_upstream_8835() -> None:
    # pop N, ack some fast (merged into the CK), ack the last after the flush started:
    # the late ack is written after the CK, with bn, so it matches (zero redeliveries).
    buffer = CheckpointBuffer()
    ck = _ck(0)
    buffer.add(ck, next_begin_queue_offset=3, now_ms=0)
    buffer.ack(ck.key, 0)
    buffer.ack(ck.key, 1)
    (flushed,) = buffer.due_for_flush(20_000)
    assert flushed.ack_bitmap == 0b011
    assert buffer.ack(ck.key, 2) is AckOutcome.MERGED
    assert buffer.ack(ck.key, 0) is AckOutcome.ALREADY_ACKED
    late = buffer.mark_durable(ck.key)
    assert late is not None
    assert late.ack_queue_offsets == (2,)
    assert late.broker_name == "broker-a"
    assert buffer.ack(ck.key, 2) is AckOutcome.NOT_BUFFERED  # durable: the caller writes ACKs


def test_flush_failure_keeps_the_ck_and_retries_it() -> None:
    buffer = CheckpointBuffer()
    ck = _ck(0)
    buffer.add(ck, next_begin_queue_offset=3, now_ms=0)
    assert buffer.due_for_flush(20_000) == [ck]
    buffer.flush_failed(ck.key, 20_000)
    assert buffer.advance_commits() == {}
    assert buffer.due_for_flush(20_000) == [ck]
    buffer.mark_durable(ck.key)
    assert buffer.advance_commits() == {QUEUE: 3}


def test_flush_failure_of_a_ck_acked_meanwhile_needs_no_write() -> None:
    buffer = CheckpointBuffer()
    ck = _ck(0, 1)
    buffer.add(ck, next_begin_queue_offset=1, now_ms=0)
    buffer.due_for_flush(20_000)
    buffer.ack(ck.key, 0)
    buffer.flush_failed(ck.key, 20_000)
    assert buffer.due_for_flush(20_000) == []
    assert buffer.advance_commits() == {QUEUE: 1}


def test_over_size_buffer_flushes_oldest_and_writes_new_ones_now() -> None:
    buffer = CheckpointBuffer(BufferSettings(max_buffered_cks=2))
    cks = [_ck(3 * i) for i in range(3)]
    outcomes = [
        buffer.add(ck, next_begin_queue_offset=ck.start_queue_offset + 3, now_ms=0) for ck in cks
    ]
    assert outcomes == [Admission.BUFFERED, Admission.BUFFERED, Admission.WRITE_NOW]
    assert buffer.stats().in_memory == 2
    assert buffer.stats().writing == 1


def test_hard_bounds_reject_the_pop_upstream_21() -> None:
    # CK writes failing for minutes must not grow memory without bound.
    buffer = CheckpointBuffer(BufferSettings(max_tracked_cks=3, max_commit_queue_len=100))
    admitted = []
    for i in range(10):
        ck = _ck(3 * i)
        admitted.append(buffer.add(ck, next_begin_queue_offset=3 * i + 3, now_ms=0))
        for flushed in buffer.due_for_flush(10**9):
            buffer.flush_failed(flushed.key, 10**9)
    assert admitted.count(Admission.REJECTED) == 7
    assert buffer.stats().in_memory + buffer.stats().writing == 3


def test_commit_deque_bound_rejects() -> None:
    buffer = CheckpointBuffer(BufferSettings(max_commit_queue_len=2))
    assert buffer.add(_ck(0), next_begin_queue_offset=3, now_ms=0) is Admission.BUFFERED
    assert buffer.add(_ck(3), next_begin_queue_offset=6, now_ms=0) is Admission.BUFFERED
    assert buffer.add(_ck(6), next_begin_queue_offset=9, now_ms=0) is Admission.REJECTED
    assert not buffer.add_just_offset(QUEUE, queue_offset=6, next_begin_queue_offset=9)
    assert buffer.latest_begin_offset(QUEUE) == 6


def test_drain_flushes_everything_and_buffers_nothing_new() -> None:
    buffer = CheckpointBuffer()
    first = _ck(0)
    buffer.add(first, next_begin_queue_offset=3, now_ms=0)
    buffer.begin_drain()
    assert buffer.add(_ck(3), next_begin_queue_offset=6, now_ms=0) is Admission.WRITE_NOW
    assert buffer.due_for_flush(0) == [first]


def test_due_for_flush_respects_limit() -> None:
    buffer = CheckpointBuffer()
    for i in range(5):
        buffer.add(_ck(3 * i), next_begin_queue_offset=3 * i + 3, now_ms=0)
    assert len(buffer.due_for_flush(20_000, limit=2)) == 2
    assert len(buffer.due_for_flush(20_000)) == 3


def test_slow_acks_after_flush_are_written_and_matched_upstream_3787() -> None:
    # Acks 9-12 s after the pop miss the in-memory CK; they become ACK records
    # (NOT_BUFFERED) written after the durable CK, never causing a redelivery.
    buffer = CheckpointBuffer()
    ck = _ck(0)
    buffer.add(ck, next_begin_queue_offset=3, now_ms=0)
    assert buffer.due_for_flush(10_001) == [ck]
    buffer.mark_durable(ck.key)
    assert [buffer.ack(ck.key, q) for q in (0, 1, 2)] == [AckOutcome.NOT_BUFFERED] * 3
    assert checkpoints.unacked_offsets(ck) == (0, 1, 2)  # the record in the log still needs them
