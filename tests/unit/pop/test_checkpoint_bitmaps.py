"""Checkpoints: index/offset mapping, bits that never un-ack, tuple match keys."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popbroker.pop import checkpoints, errors
from popbroker.pop.checkpoints import Checkpoint


def _ck(diffs: tuple[int, ...] = (0, 1, 2), **overrides: object) -> Checkpoint:
    fields: dict[str, object] = {
        "topic": "orders",
        "group": "billing",
        "queue_id": 1,
        "start_queue_offset": 100,
        "pop_time_ms": 1_000,
        "invisible_ms": 60_000,
        "revive_queue_id": 0,
        "broker_name": "broker-a",
        "queue_offset_diffs": diffs,
    }
    fields.update(overrides)
    return Checkpoint(**fields)  # type: ignore[arg-type]


diff_tuples = st.sets(st.integers(0, 800), min_size=1, max_size=32).map(lambda s: tuple(sorted(s)))


def test_revive_time_is_pop_time_plus_invisible_time() -> None:
    assert _ck().revive_time_ms == 61_000


def test_filtered_batch_maps_offsets_through_diffs() -> None:
    ck = _ck((2, 5, 9))
    assert checkpoints.queue_offsets(ck) == (102, 105, 109)
    assert checkpoints.index_of(ck, 105) == 1
    assert checkpoints.index_of(ck, 103) is None
    assert checkpoints.index_of(ck, 99) is None
    assert checkpoints.index_of(ck, 110) is None
    assert checkpoints.queue_offset_at(ck, 2) == 109
    assert ck.last_queue_offset == 109
    with pytest.raises(errors.InvalidCheckpoint):
        checkpoints.queue_offset_at(ck, 3)


def test_from_queue_offsets_builds_diffs() -> None:
    ck = checkpoints.from_queue_offsets(
        (12, 14),
        topic="t",
        group="g",
        queue_id=0,
        start_queue_offset=10,
        pop_time_ms=5,
        invisible_ms=10,
        revive_queue_id=3,
        broker_name="b",
    )
    assert ck.queue_offset_diffs == (2, 4)
    assert ck.count == 2


@pytest.mark.parametrize(
    "overrides",
    [
        {"queue_offset_diffs": ()},
        {"queue_offset_diffs": tuple(range(33))},
        {"queue_offset_diffs": (0, 0)},
        {"queue_offset_diffs": (3, 1)},
        {"queue_offset_diffs": (-1, 1)},
        {"ack_bitmap": 8},
        {"ack_bitmap": -1},
        {"start_queue_offset": -1},
        {"topic": ""},
        {"broker_name": ""},
        {"invisible_ms": -5},
    ],
)
def test_invariants_are_enforced(overrides: dict[str, object]) -> None:
    with pytest.raises(errors.InvalidCheckpoint):
        _ck(**overrides)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(diff_tuples, st.lists(st.integers(0, 31), max_size=64))
def test_bits_never_unack(diffs: tuple[int, ...], ack_indexes: list[int]) -> None:
    ck = _ck(diffs)
    acked: set[int] = set()
    for index in ack_indexes:
        if index >= ck.count:
            continue
        before = ck.ack_bitmap
        ck = checkpoints.with_bitmap(ck, 1 << index)
        acked.add(index)
        assert ck.ack_bitmap & before == before  # no bit ever cleared
    assert {i for i in range(ck.count) if checkpoints.is_acked(ck, i)} == acked
    unacked = checkpoints.unacked_offsets(ck)
    assert len(unacked) == ck.count - len(acked)
    assert checkpoints.all_acked(ck) == (len(acked) == ck.count)


@settings(max_examples=200, deadline=None)
@given(diff_tuples)
def test_index_and_offset_are_inverse(diffs: tuple[int, ...]) -> None:
    ck = _ck(diffs)
    for index in range(ck.count):
        assert checkpoints.index_of(ck, checkpoints.queue_offset_at(ck, index)) == index


def test_setting_a_bit_again_is_idempotent() -> None:
    # An offset outside the batch is the buffer's BAD_INDEX (test_checkpoint_buffer_merge).
    ck = _ck()
    assert checkpoints.index_of(ck, 500) is None
    assert checkpoints.index_of(ck, 101) == 1
    once = checkpoints.with_bitmap(ck, 1 << 1)
    assert checkpoints.with_bitmap(once, 1 << 1) is once


def test_a_bit_beyond_the_batch_is_refused() -> None:
    ck = _ck()  # the copy skips the constructor's checks: with_bitmap checks its own bits
    with pytest.raises(errors.InvalidCheckpoint, match="beyond the message count"):
        checkpoints.with_bitmap(ck, 1 << ck.count)
    assert checkpoints.with_bitmap(ck, 1 << (ck.count - 1)).ack_bitmap == 1 << (ck.count - 1)


def test_bitmap_for_counts_unknown_offsets() -> None:
    assert checkpoints.bitmap_for(_ck(), (100, 102, 7, 103)) == (0b101, 2)


def test_match_keys_of_one_request_never_collide() -> None:
    # Upstream concatenates "topic+group+queue+start+popTime+broker" without separators:
    # queue 1 / start 23 and queue 12 / start 3 give the same string. Tuples do not.
    first = _ck(queue_id=1, start_queue_offset=23).key
    second = _ck(queue_id=12, start_queue_offset=3).key
    assert first != second
    assert len({first, second}) == 2
    assert isinstance(first, tuple)


@settings(max_examples=100, deadline=None)
@given(
    diff_tuples,
    st.integers(0, 2**32 - 1),
    st.integers(0, 5),
    st.text(min_size=1, max_size=8),
)
def test_setting_bits_changes_nothing_but_the_bitmap(
    diffs: tuple[int, ...], bits: int, reput_times: int, topic: str
) -> None:
    """with_bitmap names every field itself (for speed): it must keep them all."""
    ck = _ck(diffs, reput_times=reput_times, topic=topic, ack_bitmap=1)
    wanted = (ck.ack_bitmap | bits) & checkpoints.full_bitmap(ck)
    assert checkpoints.with_bitmap(ck, wanted) == dataclasses.replace(ck, ack_bitmap=wanted)
