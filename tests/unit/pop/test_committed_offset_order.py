"""Committed offsets advance in pop order past handed-off batches only; the pop cursor."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popbroker.pop import errors
from popbroker.pop.checkpointbuffer import Admission, CheckpointBuffer
from popbroker.pop.checkpoints import Checkpoint, CheckpointKey, QueueKey

QUEUE = QueueKey("orders", "billing", 0)


def _ck(start: int, count: int = 2, *, queue_id: int = 0, pop_time_ms: int = 0) -> Checkpoint:
    return Checkpoint(
        topic="orders",
        group="billing",
        queue_id=queue_id,
        start_queue_offset=start,
        pop_time_ms=pop_time_ms,
        invisible_ms=60_000,
        revive_queue_id=0,
        broker_name="broker-a",
        queue_offset_diffs=tuple(range(count)),
    )


def test_later_durable_batch_waits_for_the_earlier_one() -> None:
    buffer = CheckpointBuffer()
    first, second = _ck(0), _ck(2)
    buffer.add(first, next_begin_queue_offset=2, now_ms=0)
    buffer.add(second, next_begin_queue_offset=4, now_ms=0)
    buffer.due_for_flush(20_000)
    buffer.mark_durable(second.key)
    assert buffer.advance_commits() == {}
    buffer.mark_durable(first.key)
    assert buffer.advance_commits() == {QUEUE: 4}
    assert buffer.advance_commits() == {}


def test_just_offset_entries_advance_in_order_with_batches() -> None:
    buffer = CheckpointBuffer()
    ck = _ck(0)
    buffer.add(ck, next_begin_queue_offset=2, now_ms=0)
    assert buffer.add_just_offset(QUEUE, queue_offset=2, next_begin_queue_offset=800)
    assert buffer.latest_begin_offset(QUEUE) == 800  # the next pop skips the filtered range
    assert buffer.advance_commits() == {}  # the just-offset waits behind the CK
    buffer.ack(ck.key, 0)
    buffer.ack(ck.key, 1)
    assert buffer.advance_commits() == {QUEUE: 800}


def test_empty_queue_just_offset_commits_at_once() -> None:
    buffer = CheckpointBuffer()
    buffer.add_just_offset(QUEUE, queue_offset=0, next_begin_queue_offset=10)
    assert buffer.advance_commits() == {QUEUE: 10}


def test_queues_advance_independently() -> None:
    buffer = CheckpointBuffer()
    a, b = _ck(0, queue_id=0), _ck(0, queue_id=1)
    buffer.add(a, next_begin_queue_offset=2, now_ms=0)
    buffer.add(b, next_begin_queue_offset=2, now_ms=0)
    buffer.ack(b.key, 0)
    buffer.ack(b.key, 1)
    assert buffer.advance_commits() == {QueueKey("orders", "billing", 1): 2}


def test_pop_behind_the_cursor_is_refused() -> None:
    buffer = CheckpointBuffer()
    buffer.add(_ck(0), next_begin_queue_offset=5, now_ms=0)
    with pytest.raises(errors.PopOrderViolation):
        buffer.add(_ck(4), next_begin_queue_offset=6, now_ms=0)
    with pytest.raises(errors.PopOrderViolation):
        buffer.add(_ck(5, 3), next_begin_queue_offset=6, now_ms=0)
    with pytest.raises(errors.PopOrderViolation):
        buffer.add_just_offset(QUEUE, queue_offset=3, next_begin_queue_offset=9)


def test_cursor_survives_commit_and_resets_with_clear_queue() -> None:
    buffer = CheckpointBuffer()
    ck = _ck(0)
    buffer.add(ck, next_begin_queue_offset=2, now_ms=0)
    buffer.ack(ck.key, 0)
    buffer.ack(ck.key, 1)
    assert buffer.advance_commits() == {QUEUE: 2}
    assert buffer.latest_begin_offset(QUEUE) == 2  # the store commit may land later
    buffer.clear_queue(QUEUE)
    assert buffer.latest_begin_offset(QUEUE) is None
    buffer.add(_ck(0), next_begin_queue_offset=2, now_ms=0)  # a reset may rewind


def test_clear_queue_keeps_in_flight_cks_for_revive() -> None:
    buffer = CheckpointBuffer()
    ck = _ck(0)
    buffer.add(ck, next_begin_queue_offset=2, now_ms=0)
    buffer.clear_queue(QUEUE)
    assert buffer.due_for_flush(20_000) == [ck]
    buffer.mark_durable(ck.key)
    assert buffer.advance_commits() == {}


# Property: after any interleaving of pops, acks, flushes, durability and commits, the
# committed offset equals the end of the longest handed-off prefix — never beyond.

operations = st.lists(
    st.tuples(
        st.sampled_from(["pop", "empty", "ack", "flush", "durable", "fail", "advance"]),
        st.integers(0, 1000),
    ),
    max_size=80,
)


@settings(max_examples=200, deadline=None)
@given(operations)
def test_committed_offset_never_passes_a_batch_not_handed_off(
    ops: list[tuple[str, int]],
) -> None:
    buffer = CheckpointBuffer()
    now_ms = 0
    next_begins: list[int] = []  # per batch, in pop order
    cks: dict[CheckpointKey, tuple[int, Checkpoint]] = {}  # key -> (batch index, ck)
    handed_off: set[int] = set()
    acked: dict[CheckpointKey, set[int]] = {}
    writing: list[CheckpointKey] = []
    cursor = 0
    committed = 0
    for op, arg in ops:
        now_ms += arg
        if op == "pop":
            count = 1 + arg % 4
            ck = _ck(cursor, count, pop_time_ms=now_ms)
            next_begin = cursor + count + arg % 3
            admission = buffer.add(ck, next_begin_queue_offset=next_begin, now_ms=now_ms)
            assert admission is not Admission.REJECTED
            cks[ck.key] = (len(next_begins), ck)
            acked[ck.key] = set()
            next_begins.append(next_begin)
            if admission is Admission.WRITE_NOW:
                writing.append(ck.key)
            cursor = next_begin
        elif op == "empty":
            buffer.add_just_offset(
                QUEUE, queue_offset=cursor, next_begin_queue_offset=cursor + arg % 5
            )
            handed_off.add(len(next_begins))
            next_begins.append(cursor + arg % 5)
            cursor = next_begins[-1]
        elif op == "ack" and cks:
            key = list(cks)[arg % len(cks)]
            index, ck = cks[key]
            buffer.ack(key, ck.start_queue_offset + arg % ck.count)
            acked[key].add(arg % ck.count)
            if len(acked[key]) == ck.count and buffer.buffered(key) is None:
                handed_off.add(index)
        elif op == "flush":
            writing.extend(flushed.key for flushed in buffer.due_for_flush(now_ms))
        elif op in ("durable", "fail") and writing:
            key = writing.pop(arg % len(writing))
            if op == "durable":
                buffer.mark_durable(key)
                handed_off.add(cks[key][0])
            else:
                buffer.flush_failed(key, now_ms)
                if buffer.buffered(key) is None:
                    handed_off.add(cks[key][0])
        elif op == "advance":
            advanced = buffer.advance_commits()
            if QUEUE in advanced:
                assert advanced[QUEUE] >= committed
                committed = advanced[QUEUE]
            prefix_end = 0
            for index, next_begin in enumerate(next_begins):
                if index not in handed_off:
                    break
                prefix_end = next_begin
            assert committed == prefix_end
        if next_begins:
            assert buffer.latest_begin_offset(QUEUE) == cursor
