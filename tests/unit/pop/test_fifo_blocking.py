"""FIFO order info: blocking, attempt-id re-reads, acks and reconsume counts (upstream #24)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popbroker.pop import errors, orderinfo
from popbroker.pop.orderinfo import FifoAckStatus, OrderInfo


def _pop(
    previous: OrderInfo | None = None,
    offsets: tuple[int, ...] = (10, 11, 12),
    *,
    pop_time_ms: int = 0,
    invisible_ms: int = 30_000,
    attempt_id: str | None = "a1",
) -> OrderInfo:
    return orderinfo.on_pop(
        previous,
        queue_offsets=offsets,
        pop_time_ms=pop_time_ms,
        invisible_ms=invisible_ms,
        attempt_id=attempt_id,
    )


def test_queue_blocked_while_last_batch_invisible_and_unacked() -> None:
    info = _pop()
    assert not orderinfo.check_block(None, None, 0)
    assert orderinfo.check_block(info, "other", 29_999)
    assert not orderinfo.check_block(info, "other", 30_000)  # invisible time over
    assert orderinfo.unblock_time_ms(info) == 30_000


def test_same_attempt_id_rereads_the_batch_at_once_upstream_24() -> None:
    # a lost pop response + retry with the same attempt id → same batch, immediately
    info = _pop(attempt_id="attempt-7")
    assert not orderinfo.check_block(info, "attempt-7", 1)
    again = _pop(info, attempt_id="attempt-7", pop_time_ms=1)
    assert [orderinfo.reconsume_times(again, q) for q in (10, 11, 12)] == [0, 0, 0]


def test_all_acked_unblocks_and_commits_batch_end() -> None:
    info: OrderInfo | None = _pop()
    committed = 10
    for queue_offset, expected_next in ((10, 11), (12, 11), (11, 13)):
        result = orderinfo.on_ack(
            info, queue_offset=queue_offset, pop_time_ms=0, committed_queue_offset=committed
        )
        assert result.status is FifoAckStatus.ACKED
        assert result.next_committed_queue_offset == expected_next
        info = result.info
        committed = expected_next
    assert not orderinfo.check_block(info, None, 1)
    assert orderinfo.unblock_time_ms(info) is None


def test_stale_and_illegal_acks() -> None:
    info = _pop()
    older = orderinfo.on_ack(info, queue_offset=10, pop_time_ms=5, committed_queue_offset=10)
    assert older.status is FifoAckStatus.STALE
    below = orderinfo.on_ack(info, queue_offset=3, pop_time_ms=0, committed_queue_offset=10)
    assert below.status is FifoAckStatus.STALE
    outside = orderinfo.on_ack(info, queue_offset=40, pop_time_ms=0, committed_queue_offset=10)
    assert outside.status is FifoAckStatus.NOT_IN_BATCH


def test_ack_without_order_info_never_skips_unacked_messages() -> None:
    skip = orderinfo.on_ack(None, queue_offset=12, pop_time_ms=0, committed_queue_offset=10)
    assert skip.status is FifoAckStatus.STALE
    head = orderinfo.on_ack(None, queue_offset=10, pop_time_ms=0, committed_queue_offset=10)
    assert head.next_committed_queue_offset == 11


def test_redelivery_increments_reconsume_count_once() -> None:
    first = _pop(attempt_id="a1")
    acked = orderinfo.on_ack(first, queue_offset=10, pop_time_ms=0, committed_queue_offset=10).info
    assert acked is not None
    # invisible time over; the next pop (new attempt) re-reads from the first un-acked offset
    second = _pop(acked, (11, 12, 13), pop_time_ms=30_000, attempt_id="a2")
    assert [orderinfo.reconsume_times(second, q) for q in (11, 12, 13)] == [1, 1, 0]
    third = _pop(second, (11, 12, 13), pop_time_ms=60_000, attempt_id="a3")
    assert [orderinfo.reconsume_times(third, q) for q in (11, 12, 13)] == [2, 2, 1]
    with pytest.raises(errors.InvalidCheckpoint):
        orderinfo.reconsume_times(third, 99)


def test_change_invisible_extends_one_message() -> None:
    info = _pop()
    changed, handle_invisible_ms = orderinfo.change_invisible(
        info, queue_offset=11, pop_time_ms=0, invisible_ms=50_000, now_ms=10_000
    )
    assert handle_invisible_ms == 60_000  # counted from the batch pop time
    assert orderinfo.check_block(changed, None, 59_999)
    assert not orderinfo.check_block(changed, None, 60_000)
    with pytest.raises(errors.InvalidReceiptHandle):
        orderinfo.change_invisible(info, queue_offset=11, pop_time_ms=1, invisible_ms=1, now_ms=1)
    with pytest.raises(errors.InvalidReceiptHandle):
        orderinfo.change_invisible(info, queue_offset=99, pop_time_ms=0, invisible_ms=1, now_ms=1)


def test_order_info_invariants() -> None:
    with pytest.raises(errors.InvalidCheckpoint):
        _pop(offsets=())
    with pytest.raises(errors.InvalidCheckpoint):
        _pop(offsets=(3, 2))


# Property: simulate a FIFO queue with arbitrary ack subsets and clock steps. Messages are
# delivered in order, never while an earlier one is invisible and un-acked, and every
# redelivery bumps the reconsume count by exactly one.


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["pop", "repop", "ack", "tick"]), st.integers(0, 40_000)),
        max_size=60,
    )
)
def test_fifo_order_and_counts_hold_under_arbitrary_acks(ops: list[tuple[str, int]]) -> None:
    queue_max = 50
    committed = 0
    info: OrderInfo | None = None
    now_ms = 0
    attempts = 0
    deliveries: dict[int, int] = {}
    acked: set[int] = set()
    for op, arg in ops:
        if op == "tick":
            now_ms += arg
        elif op in ("pop", "repop"):
            same_attempt = op == "repop" and info is not None
            attempt_id = info.attempt_id if same_attempt and info is not None else f"a{attempts}"
            attempts += 1
            if orderinfo.check_block(info, attempt_id, now_ms) or committed >= queue_max:
                continue
            offsets = tuple(range(committed, min(queue_max, committed + 1 + arg % 4)))
            if same_attempt and info is not None:
                for queue_offset in info.queue_offsets:  # that response never arrived: undo
                    deliveries[queue_offset] -= 1
            info = orderinfo.on_pop(
                info,
                queue_offsets=offsets,
                pop_time_ms=now_ms,
                invisible_ms=10_000,
                attempt_id=attempt_id,
            )
            for queue_offset in offsets:
                # in order: everything before is acked (committed) or in this batch
                assert all(q in acked or q >= committed for q in range(queue_offset))
                assert orderinfo.reconsume_times(info, queue_offset) == deliveries.get(
                    queue_offset, 0
                )
                deliveries[queue_offset] = deliveries.get(queue_offset, 0) + 1
        elif op == "ack" and info is not None:
            queue_offset = info.queue_offsets[arg % len(info.queue_offsets)]
            result = orderinfo.on_ack(
                info,
                queue_offset=queue_offset,
                pop_time_ms=info.pop_time_ms,
                committed_queue_offset=committed,
            )
            if result.status is FifoAckStatus.ACKED:
                info = result.info
                acked.add(queue_offset)
                assert result.next_committed_queue_offset is not None
                assert result.next_committed_queue_offset >= committed
                committed = result.next_committed_queue_offset
        # the committed offset never passes an un-acked delivered message
        assert all(q in acked for q in deliveries if q < committed)
