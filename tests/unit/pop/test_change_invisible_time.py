"""Change of invisible time: new one-message CK, old ack, new handle (upstream #11, #12)."""

from __future__ import annotations

import dataclasses

import pytest

from popbroker.pop import checkpoints, errors, invisibility, receipts, records
from popbroker.pop.checkpointbuffer import AckOutcome, CheckpointBuffer
from popbroker.pop.receipts import ReceiptHandle, TopicType
from popbroker.pop.reviving import ReviveLedger

BROKER = "broker-a"


def _batch_handles(count: int = 10, *, pop_time_ms: int = 1_000) -> list[ReceiptHandle]:
    return [
        ReceiptHandle(
            start_queue_offset=200,
            pop_time_ms=pop_time_ms,
            invisible_ms=30_000,
            revive_queue_id=2,
            topic_type=TopicType.NORMAL,
            broker_name=BROKER,
            queue_id=3,
            queue_offset=200 + i,
            physical_offset=4096 * i,
        )
        for i in range(count)
    ]


def _batch_ck(count: int = 10) -> checkpoints.Checkpoint:
    return checkpoints.from_queue_offsets(
        range(200, 200 + count),
        topic="orders",
        group="billing",
        queue_id=3,
        start_queue_offset=200,
        pop_time_ms=1_000,
        invisible_ms=30_000,
        revive_queue_id=2,
        broker_name=BROKER,
    )


def test_plan_builds_one_message_ck_old_ack_and_new_handle() -> None:
    old = _batch_handles()[4]
    change = invisibility.plan_change(
        old,
        topic="orders",
        group="billing",
        new_invisible_ms=60_000,
        now_ms=5_000,
        min_queue_offset=0,
        max_queue_offset=1_000,
    )
    assert change.checkpoint.start_queue_offset == 204
    assert change.checkpoint.queue_offset_diffs == (0,)
    assert change.checkpoint.pop_time_ms == 5_000
    assert change.checkpoint.revive_time_ms == 65_000
    assert change.checkpoint.revive_queue_id == 2
    assert change.old_ack_key == _batch_ck().key
    assert change.queue_offset == 204
    assert change.handle.start_queue_offset == 204  # not the old batch start (#9583)
    assert change.handle.pop_time_ms == 5_000
    assert change.handle.queue_offset == 204
    assert change.handle.physical_offset == old.physical_offset
    assert receipts.decode(receipts.encode(change.handle), now_ms=5_000) == change.handle


@pytest.mark.parametrize("batch_ck_durable", [False, True])
def test_change_on_5th_of_10_then_ack_with_new_handle_no_redelivery_upstream_11(
    batch_ck_durable: bool,
) -> None:
    buffer = CheckpointBuffer()
    ledger = ReviveLedger(revive_queue_id=2, local_broker_name=BROKER, start_revive_queue_offset=0)
    revive_log: list[records.Record] = []

    def ack(key: checkpoints.CheckpointKey, queue_offset: int) -> None:
        if buffer.ack(key, queue_offset) is AckOutcome.NOT_BUFFERED:
            revive_log.append(records.ack_for(key, (queue_offset,)))

    batch = _batch_ck()
    buffer.add(batch, next_begin_queue_offset=210, now_ms=1_000)
    if batch_ck_durable:
        revive_log.extend(buffer.due_for_flush(10**9))
        buffer.mark_durable(batch.key)
    handles = _batch_handles()
    for handle in handles[:4] + handles[5:]:  # everything but the 5th acked
        ack(invisibility.handle_key(handle, topic="orders", group="billing"), handle.queue_offset)
    change = invisibility.plan_change(
        handles[4],
        topic="orders",
        group="billing",
        new_invisible_ms=60_000,
        now_ms=5_000,
        min_queue_offset=0,
        max_queue_offset=1_000,
    )
    revive_log.append(change.checkpoint)  # 1. the new CK is durable first
    ack(change.old_ack_key, change.queue_offset)  # 2. then the old handle is acked
    # 3. the client acks with the NEW handle: it matches the new CK
    ack(invisibility.handle_key(change.handle, topic="orders", group="billing"), 204)
    assert buffer.due_for_flush(10**9) == []  # the in-memory batch CK was fully acked
    for position, record in enumerate(revive_log):
        if isinstance(record, checkpoints.Checkpoint):
            ledger.observe_ck(record, position)
        else:
            ledger.observe_ack(record, position)
    assert ledger.due(10**12) == []
    assert ledger.stats().orphan_acks == 0


def test_change_at_queue_max_is_refused_upstream_12() -> None:
    old = _batch_handles()[9]  # queue offset 209
    with pytest.raises(errors.QueueOffsetOutOfRange):
        invisibility.plan_change(
            old,
            topic="orders",
            group="billing",
            new_invisible_ms=1_000,
            now_ms=2_000,
            min_queue_offset=0,
            max_queue_offset=209,
        )
    with pytest.raises(errors.QueueOffsetOutOfRange):
        invisibility.plan_change(
            old,
            topic="orders",
            group="billing",
            new_invisible_ms=1_000,
            now_ms=2_000,
            min_queue_offset=210,
            max_queue_offset=300,
        )


def test_invisible_time_bounds_and_fifo_handles() -> None:
    old = _batch_handles()[0]
    with pytest.raises(errors.IllegalInvisibleTime):
        invisibility.plan_change(
            old,
            topic="orders",
            group="billing",
            new_invisible_ms=12 * 3600 * 1000 + 1,
            now_ms=2_000,
            min_queue_offset=0,
            max_queue_offset=300,
        )
    fifo = dataclasses.replace(old, revive_queue_id=999)
    with pytest.raises(errors.InvalidReceiptHandle):
        invisibility.plan_change(
            fifo,
            topic="orders",
            group="billing",
            new_invisible_ms=1_000,
            now_ms=2_000,
            min_queue_offset=0,
            max_queue_offset=300,
        )


def test_superseded_handles_are_remembered_until_the_old_deadline() -> None:
    table = invisibility.SupersededHandles(max_entries=2)
    old = _batch_handles()[4]
    key = invisibility.handle_key(old, topic="orders", group="billing")
    until = invisibility.superseded_until_ms(old)
    table.add(key, old.queue_offset, expires_at_ms=until, now_ms=5_000)
    assert table.is_superseded(key, 204, 5_001)
    assert not table.is_superseded(key, 205, 5_001)
    assert not table.is_superseded(key, 204, until)
    for i in range(5):  # bounded
        table.add(key, 300 + i, expires_at_ms=until + i, now_ms=5_000)
    assert len(table) <= 2
