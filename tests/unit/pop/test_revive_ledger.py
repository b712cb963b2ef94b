"""Revive ledger: matching, due times, failures, safe progress (upstream #3-#8, #10, #19, #25)."""

from __future__ import annotations

import pytest

from popbroker.pop import checkpoints, errors, records
from popbroker.pop.checkpoints import Checkpoint
from popbroker.pop.records import AckRecord
from popbroker.pop.reviving import (
    ReadVerdict,
    ReviveLedger,
    ReviveSettings,
    reput_backoff_ms,
    verify_revive_read,
)

BROKER = "broker-a"


def _ck(
    start: int = 100, count: int = 3, *, pop_time_ms: int = 0, invisible_ms: int = 60_000
) -> Checkpoint:
    return Checkpoint(
        topic="orders",
        group="billing",
        queue_id=1,
        start_queue_offset=start,
        pop_time_ms=pop_time_ms,
        invisible_ms=invisible_ms,
        revive_queue_id=0,
        broker_name=BROKER,
        queue_offset_diffs=tuple(range(count)),
    )


def _ack(ck: Checkpoint, *offsets: int, broker_name: str | None = BROKER) -> AckRecord:
    return AckRecord(
        topic=ck.topic,
        group=ck.group,
        queue_id=ck.queue_id,
        start_queue_offset=ck.start_queue_offset,
        pop_time_ms=ck.pop_time_ms,
        broker_name=broker_name,
        ack_queue_offsets=offsets,
    )


def _ledger(start: int = 0, **settings: int) -> ReviveLedger:
    return ReviveLedger(
        revive_queue_id=0,
        local_broker_name=BROKER,
        start_revive_queue_offset=start,
        settings=ReviveSettings(**settings),
    )


def test_unacked_messages_are_revived_once_due() -> None:
    ledger = _ledger(ack_grace_ms=300)
    ck = _ck()
    ledger.observe_ck(ck, 0)
    ledger.observe_ack(_ack(ck, 101), 1)
    (task,) = ledger.due(60_300)
    assert task.queue_offsets == (100, 102)
    assert ledger.due(60_300) == []  # in flight: never handed out twice
    ledger.complete(task)
    assert ledger.safe_revive_offset() == 2
    assert ledger.stats().pending == 0


def test_not_revived_before_due_upstream_3507_and_5() -> None:
    ledger = _ledger(ack_grace_ms=300)
    ledger.observe_ck(_ck(), 0)
    assert ledger.due(60_299) == []
    assert ledger.safe_revive_offset() == 0


def test_ack_just_before_the_deadline_prevents_redelivery_upstream_2() -> None:
    ledger = _ledger()
    ck = _ck(count=1)
    ledger.observe_ck(ck, 0)
    ledger.observe_ack(_ack(ck, 100), 1)  # acked 1 ms before the deadline
    assert ledger.due(10**9) == []
    assert ledger.stats().resolved == 1


def test_ack_after_revive_is_an_orphan_and_causes_one_redelivery_upstream_2() -> None:
    ledger = _ledger()
    ck = _ck(count=1)
    ledger.observe_ck(ck, 0)
    (task,) = ledger.due(70_000)
    ledger.complete(task)
    ledger.observe_ack(_ack(ck, 100), 1)  # 5 s after the deadline
    assert ledger.stats().orphan_acks == 1
    assert ledger.due(10**9) == []


def test_ack_only_tail_does_not_stall_revive_offset_upstream_3443() -> None:
    ledger = _ledger()
    ghost = _ck(start=5)
    for position in range(10_000):
        ledger.observe_ack(_ack(ghost, 5), position)
    assert ledger.safe_revive_offset() == 10_000
    assert ledger.stats().orphan_acks == 10_000


def test_double_acks_do_not_stall_progress_upstream_5408() -> None:
    ledger = _ledger()
    position = 0
    for i in range(50):
        ck = _ck(start=10 * i, count=2)
        ledger.observe_ck(ck, position)
        position += 1
        for _ in range(2):  # every message acked twice
            ledger.observe_ack(_ack(ck, ck.start_queue_offset, ck.start_queue_offset + 1), position)
            position += 1
    assert ledger.stats().pending == 0
    assert ledger.stats().orphan_acks == 50  # the CK resolved at the first ack
    assert ledger.safe_revive_offset() == position


def test_safe_offset_stops_at_the_oldest_unresolved_ck() -> None:
    ledger = _ledger(start=40)
    first, second = _ck(start=0, invisible_ms=10_000), _ck(start=10, invisible_ms=1_000)
    ledger.observe_ck(first, 40)
    ledger.observe_ack(_ack(first, 0), 41)
    ledger.observe_ck(second, 42)
    (task,) = ledger.due(2_000)  # the second is due first
    assert task.checkpoint.key == second.key
    ledger.complete(task)
    assert ledger.safe_revive_offset() == 40
    (task,) = ledger.due(11_000)
    ledger.complete(task)
    assert ledger.safe_revive_offset() == 43


def test_ack_without_bn_matches_local_broker_upstream_9_10() -> None:
    ledger = _ledger()
    ck = _ck(count=1)
    ledger.observe_ck(ck, 0)
    ledger.observe_ack(_ack(ck, 100, broker_name=None), 1)
    assert ledger.due(10**9) == []


def test_ack_from_another_broker_does_not_match() -> None:
    ledger = _ledger()
    ck = _ck(count=1)
    ledger.observe_ck(ck, 0)
    ledger.observe_ack(_ack(ck, 100, broker_name="broker-b"), 1)
    assert len(ledger.due(10**9)) == 1
    assert ledger.stats().orphan_acks == 1


def test_bogus_offsets_are_counted_and_ignored() -> None:
    ledger = _ledger()
    ck = _ck()
    ledger.observe_ck(ck, 0)
    ledger.observe_ack(_ack(ck, 7, 101, 999), 1)
    assert ledger.stats().bogus_ack_offsets == 2
    (task,) = ledger.due(10**9)
    assert task.queue_offsets == (100, 102)


def test_failure_retries_the_original_unacked_offsets_upstream_25() -> None:
    ledger = _ledger()
    ck = _ck(count=4)
    ledger.observe_ck(ck, 0)
    ledger.observe_ack(_ack(ck, 101), 1)
    (task,) = ledger.due(61_000)
    ledger.fail(task, 61_000, succeeded_queue_offsets=(100,))
    assert ledger.due(61_000 + 9_999) == []
    (retry,) = ledger.due(61_000 + 10_000)
    # the same CK, its remaining un-acked offsets; 100 was already re-put (never twice, #7724)
    assert retry.checkpoint.key == ck.key
    assert retry.queue_offsets == (102, 103)
    assert retry.attempt == 1
    assert ledger.safe_revive_offset() == 0  # never committed past a failed CK (#10985/#19)
    ledger.fail(retry, 80_000)
    (third,) = ledger.due(80_000 + 20_000)
    assert third.queue_offsets == (102, 103)
    ledger.complete(third)
    assert ledger.safe_revive_offset() == 2


def test_stale_tasks_are_ignored() -> None:
    ledger = _ledger()
    ledger.observe_ck(_ck(), 0)
    (task,) = ledger.due(10**9)
    ledger.complete(task)
    ledger.complete(task)
    ledger.fail(task, 10**9)
    assert ledger.stats().in_flight == 0


def test_acks_arriving_while_in_flight_shrink_the_retry() -> None:
    ledger = _ledger()
    ck = _ck()
    ledger.observe_ck(ck, 0)
    (task,) = ledger.due(10**9)
    ledger.observe_ack(_ack(ck, 100, 101, 102), 1)
    ledger.fail(task, 10**9)  # nothing left: resolves
    assert ledger.stats().pending == 0


def test_duplicate_ck_records_merge() -> None:
    ledger = _ledger()
    ck = _ck()
    ledger.observe_ck(ck, 0)
    ledger.observe_ck(checkpoints.with_bitmap(ck, 0b1), 5)  # offset 100 acked
    (task,) = ledger.due(10**9)
    assert task.queue_offsets == (101, 102)
    assert task.revive_queue_offset == 0
    assert ledger.stats().duplicate_cks == 1


def test_fully_acked_ck_record_resolves_silently() -> None:
    ledger = _ledger()
    ck = checkpoints.with_bitmap(_ck(), 0b111)
    ledger.observe_ck(ck, 0)
    assert ledger.stats().pending == 0
    assert ledger.safe_revive_offset() == 1


def test_records_must_be_observed_in_order() -> None:
    ledger = _ledger(start=10)
    with pytest.raises(errors.PopOrderViolation):
        ledger.observe_ck(_ck(), 9)
    ledger.observe_other(10)
    with pytest.raises(errors.PopOrderViolation):
        ledger.observe_ack(_ack(_ck(), 100), 10)


def test_full_ledger_refuses_new_cks_without_losing_state() -> None:
    ledger = _ledger(max_pending_cks=1)
    ledger.observe_ck(_ck(start=0), 0)
    assert not ledger.has_capacity
    with pytest.raises(errors.CapacityExceeded):
        ledger.observe_ck(_ck(start=10), 1)
    assert ledger.scanned_end == 1  # rescan the refused record later
    ledger.observe_ck(_ck(start=0), 1)  # a duplicate of a pending CK is still accepted


def test_malformed_records_are_skipped() -> None:
    ledger = _ledger()
    with pytest.raises(errors.MalformedRecord):
        records.decode("ck", b"{oops", revive_queue_id=0)
    ledger.observe_other(0)
    assert ledger.safe_revive_offset() == 1
    assert ledger.stats().other_records == 1


def test_backoff_intervals() -> None:
    assert [reput_backoff_ms(a) // 1000 for a in (0, 1, 2, 3, 16, 40)] == [
        10,
        20,
        30,
        60,
        7200,
        7200,
    ]


def test_due_respects_limit() -> None:
    ledger = _ledger()
    for i in range(5):
        ledger.observe_ck(_ck(start=10 * i), i)
    assert len(ledger.due(10**9, limit=2)) == 2
    assert len(ledger.due(10**9)) == 3


@pytest.mark.parametrize(
    ("expected", "min_offset", "max_offset", "read", "topic_exists", "verdict"),
    [
        (5, 0, 10, 5, True, ReadVerdict.REPUT),
        (
            5,
            0,
            10,
            6,
            True,
            ReadVerdict.SKIP_MISMATCH,
        ),  # upstream #7724: never re-put another message
        (12, 0, 10, None, True, ReadVerdict.SKIP_BEYOND_MAX),  # upstream #8479: topic recreated
        (10, 0, 10, None, True, ReadVerdict.SKIP_BEYOND_MAX),
        (5, 6, 10, None, True, ReadVerdict.SKIP_REMOVED),
        (5, 0, 10, None, True, ReadVerdict.RETRY_LATER),  # upstream #10985: a failed read retries
        (5, 0, 10, 5, False, ReadVerdict.SKIP_TOPIC_GONE),
    ],
)
def test_revive_read_verification_upstream_6_8(
    expected: int,
    min_offset: int,
    max_offset: int,
    read: int | None,
    topic_exists: bool,
    verdict: ReadVerdict,
) -> None:
    assert (
        verify_revive_read(
            expected_queue_offset=expected,
            min_queue_offset=min_offset,
            max_queue_offset=max_offset,
            read_queue_offset=read,
            topic_exists=topic_exists,
        )
        is verdict
    )


def test_topic_recreated_ck_resolves_instead_of_looping_upstream_8479() -> None:
    ledger = _ledger()
    ck = _ck(start=500, count=2)
    ledger.observe_ck(ck, 0)
    (task,) = ledger.due(10**9)
    verdicts = [
        verify_revive_read(
            expected_queue_offset=offset,
            min_queue_offset=0,
            max_queue_offset=3,
            read_queue_offset=None,
        )
        for offset in task.queue_offsets
    ]
    assert verdicts == [ReadVerdict.SKIP_BEYOND_MAX] * 2
    ledger.complete(task)  # every offset skipped: done, not retried forever
    assert ledger.due(10**12) == []


def test_distinct_cks_sharing_a_key_are_kept_apart_and_acks_apply_to_both() -> None:
    # A change-invisible CK and a post-crash re-pop batch in the same millisecond can share
    # (topic, group, queue, start, pop time, broker). Neither may swallow the other.
    ledger = _ledger()
    batch = _ck(count=3)
    single = _ck(count=1)
    assert batch.key == single.key
    ledger.observe_ck(batch, 0)
    ledger.observe_ck(single, 1)
    assert ledger.stats().pending == 2
    ledger.observe_ack(_ack(batch, 100), 2)  # the one shared offset: both get it
    (task,) = ledger.due(10**9)
    assert task.queue_offsets == (101, 102)
    ledger.complete(task)
    assert ledger.safe_revive_offset() == 3
