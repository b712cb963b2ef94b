"""Pop planning: validation, revive queue round-robin, retry preference, visit order,
pop offsets, initial offsets and rest_num."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popbroker.pop import errors, popping
from popbroker.pop.popping import InitMode, QueueVisit, VisitOutcome

RETRY = "%RETRY%billing+orders"


@pytest.mark.parametrize("size", [1, 16, 32])
def test_batch_sizes_up_to_32_pass(size: int) -> None:
    assert popping.validate_batch_size(size) == size


@pytest.mark.parametrize("size", [0, -1, 33, 10**6])
def test_batch_size_outside_1_to_32_is_illegal(size: int) -> None:
    with pytest.raises(errors.IllegalBatchSize):
        popping.validate_batch_size(size)


@pytest.mark.parametrize("invisible_ms", [999, 12 * 3600 * 1000 + 1, -1])
def test_receive_invisible_time_bounds(invisible_ms: int) -> None:
    with pytest.raises(errors.IllegalInvisibleTime):
        popping.validate_invisible_ms(invisible_ms)


def test_invisible_bounds_are_inclusive_and_change_allows_zero() -> None:
    assert popping.validate_invisible_ms(1_000) == 1_000
    assert popping.validate_invisible_ms(12 * 3600 * 1000) == 12 * 3600 * 1000
    assert popping.validate_invisible_ms(0, popping.CHANGE_INVISIBLE_BOUNDS) == 0


def test_revive_queue_is_round_robin_per_request_and_999_for_fifo() -> None:
    chosen = [
        popping.choose_revive_queue_id(seq, revive_queue_num=8, fifo=False) for seq in range(16)
    ]
    assert chosen == list(range(8)) * 2
    assert popping.choose_revive_queue_id(5, revive_queue_num=8, fifo=True) == 999


def test_retry_first_one_in_five() -> None:
    firsts = Counter(popping.retry_first(r) for r in range(100))
    assert firsts[True] == 20


def test_specific_queue_with_retry_as_filler() -> None:
    visits = popping.plan_visits(
        topic="orders", group="billing", queue_id=2, read_queue_num=4, random_percent=50, fifo=False
    )
    assert visits == (QueueVisit("orders", 2, False), QueueVisit(RETRY, 0, True))


def test_retry_first_when_drawn() -> None:
    visits = popping.plan_visits(
        topic="orders", group="billing", queue_id=2, read_queue_num=4, random_percent=7, fifo=False
    )
    assert visits[0] == QueueVisit(RETRY, 0, True)


def test_all_queues_rotate_the_start() -> None:
    visits = popping.plan_visits(
        topic="orders", group="billing", queue_id=-1, read_queue_num=4, random_percent=42, fifo=True
    )
    assert [v.queue_id for v in visits] == [2, 3, 0, 1]
    assert all(not v.is_retry for v in visits)  # FIFO never reads a retry topic


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 64), st.integers(0, 99), st.integers(-5, -1))
def test_all_queues_visits_each_exactly_once(
    read_queue_num: int, random_percent: int, queue_id: int
) -> None:
    visits = popping.plan_visits(
        topic="t",
        group="g",
        queue_id=queue_id,
        read_queue_num=read_queue_num,
        random_percent=random_percent,
        fifo=False,
    )
    normal = [v.queue_id for v in visits if not v.is_retry]
    assert sorted(normal) == list(range(read_queue_num))
    assert sum(v.is_retry for v in visits) == 1


def test_queue_id_beyond_read_queues_is_illegal() -> None:
    with pytest.raises(errors.IllegalQueueId):
        popping.plan_visits(
            topic="t", group="g", queue_id=4, read_queue_num=4, random_percent=0, fifo=False
        )


def test_pop_offset_is_max_of_committed_and_cursor() -> None:
    start = popping.pop_offset(committed_queue_offset=10, pop_cursor=25, init_queue_offset=0)
    assert start.queue_offset == 25
    assert not start.initialized
    behind = popping.pop_offset(committed_queue_offset=30, pop_cursor=25, init_queue_offset=0)
    assert behind.queue_offset == 30


def test_a_cursor_alone_decides_and_initializes_nothing() -> None:
    # What the popack does while its buffer has a cursor: no committed offset read.
    start = popping.pop_offset(pop_cursor=40)
    assert start == popping.PopStart(40, initialized=False)


def test_without_a_cursor_the_committed_offset_wins_over_the_initial_one() -> None:
    start = popping.pop_offset(pop_cursor=None, committed_queue_offset=5, init_queue_offset=99)
    assert start == popping.PopStart(5, initialized=False)


def test_new_group_starts_at_the_initial_offset() -> None:
    start = popping.pop_offset(
        committed_queue_offset=None,
        pop_cursor=None,
        init_queue_offset=7,
    )
    assert start.queue_offset == 7
    assert start.initialized
    with pytest.raises(ValueError, match="no pop cursor"):
        popping.pop_offset(pop_cursor=None)


@pytest.mark.parametrize(
    ("topic", "mode", "min_offset", "max_offset", "expected"),
    [
        ("orders", InitMode.MIN, 5, 100, 5),
        (RETRY, InitMode.MAX, 5, 100, 5),  # retry topics always from min
        ("orders", InitMode.MAX, 0, 100, 0),  # young queue: from the beginning
        ("orders", InitMode.MAX, 40, 100, 99),  # pop the last one
        ("orders", InitMode.MAX, 0, 0, 0),
        ("orders", InitMode.MAX, 40, 40, 40),
    ],
)
def test_initial_offset_rules(
    topic: str, mode: InitMode, min_offset: int, max_offset: int, expected: int
) -> None:
    assert (
        popping.init_queue_offset(
            topic=topic, init_mode=mode, min_queue_offset=min_offset, max_queue_offset=max_offset
        )
        == expected
    )


def test_rest_num_accounting() -> None:
    read = popping.rest_contribution(
        VisitOutcome.READ, max_queue_offset=100, pop_queue_offset=10, next_begin_queue_offset=42
    )
    throttled = popping.rest_contribution(
        VisitOutcome.OVER_THRESHOLD, max_queue_offset=100, pop_queue_offset=10
    )
    rejected = popping.rest_contribution(
        VisitOutcome.REJECTED, max_queue_offset=100, pop_queue_offset=10
    )
    blocked = popping.rest_contribution(
        VisitOutcome.FIFO_BLOCKED, max_queue_offset=100, pop_queue_offset=10
    )
    assert (read, throttled, rejected, blocked) == (58, 90, 90, 0)
    # A contended lock or a full batch: the offsets were not read; one wakes another poller.
    assert popping.rest_contribution(VisitOutcome.LOCKED) == 1
    assert popping.rest_contribution(VisitOutcome.BATCH_FULL) == 1
    assert (
        popping.rest_contribution(
            VisitOutcome.OVER_THRESHOLD, max_queue_offset=5, pop_queue_offset=9
        )
        == 0
    )


def test_fifo_blocked_queue_adds_nothing_to_rest_num_upstream_8592() -> None:
    # A blocked FIFO queue with producers running must not keep waking pollers.
    assert (
        popping.rest_contribution(
            VisitOutcome.FIFO_BLOCKED, max_queue_offset=10**6, pop_queue_offset=0
        )
        == 0
    )


def test_remaining_batch() -> None:
    assert popping.remaining_batch(32, 30) == 2
    assert popping.remaining_batch(32, 40) == 0
