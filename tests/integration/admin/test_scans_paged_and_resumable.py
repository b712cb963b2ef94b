"""ScanReviveLog and ScanOffsets: every field, paged, resumable, bounded."""

from __future__ import annotations

import pytest

from popbroker.pop import records, revivelog
from popfleet_api import errors
from popfleet_api.client import BrokerAdmin
from popfleet_api.models import (
    AckRecord,
    CheckpointRecord,
    DelayRecord,
    Group,
    OffsetTableKey,
    ReviveRecord,
    ReviveRecordKind,
    Topic,
)
from tests.integration.admin.conftest import BROKER, Broker
from tests.integration.admin.revivelogs import append_raw, append_record, checkpoint


async def _revive_log_of_every_kind(broker: Broker) -> int:
    """Write CK, ACK, bAck, delay and two malformed records to revive queue 1; the pop time."""
    pop_time = broker.clock.now_ms
    ck = checkpoint((5, 7, 8), pop_time_ms=pop_time, revive_queue_id=1)
    await append_record(broker.store, ck, revive_queue_id=1)
    await append_record(broker.store, records.ack_for(ck.key, (7,)), revive_queue_id=1)
    await append_record(broker.store, records.ack_for(ck.key, (5, 8)), revive_queue_id=1)
    await append_raw(
        broker.store,
        tag=revivelog.DELAY_TAG,
        body=b"later",
        revive_queue_id=1,
        DELAY_TARGET_TOPIC="orders",
        DELAY_TARGET_QUEUE="3",
        DELAY_DELIVER_MS=str(pop_time + 9_000),
    )
    await append_raw(broker.store, tag="ck", body=b"{not json", revive_queue_id=1)
    await append_raw(broker.store, tag="mystery", body=b"{}", revive_queue_id=1)
    return pop_time


async def test_revive_log_records_carry_every_field(admin: BrokerAdmin, broker: Broker) -> None:
    pop_time = await _revive_log_of_every_kind(broker)
    pages = [page async for page in admin.scan_revive_log(1)]
    assert len(pages) == 1
    [page] = pages
    assert (page.revive_queue_id, page.next_queue_offset, page.end_of_log) == (1, 6, True)
    assert (page.min_queue_offset, page.max_queue_offset) == (0, 6)
    ck, ack, back, delay, bad_ck, unknown = page.records
    assert ck == ReviveRecord(
        revive_queue_id=1,
        queue_offset=0,
        next_queue_offset=1,
        store_timestamp_ms=pop_time,
        kind=ReviveRecordKind.CHECKPOINT,
        tag="ck",
        checkpoint=CheckpointRecord(
            topic="orders",
            group="billing",
            queue_id=0,
            start_queue_offset=5,
            pop_time_ms=pop_time,
            invisible_ms=60_000,
            revive_time_ms=pop_time + 60_000,
            ack_bitmap=0,
            queue_offset_diffs=(0, 2, 3),
            queue_offsets=(5, 7, 8),
            broker_name=BROKER,
            reput_times=0,
        ),
    )
    assert ack.kind is ReviveRecordKind.ACK
    assert ack.ack == AckRecord("orders", "billing", 0, 5, pop_time, BROKER, (7,))
    assert back.kind is ReviveRecordKind.BATCH_ACK
    assert back.ack is not None
    assert back.ack.ack_queue_offsets == (5, 8)
    assert delay.kind is ReviveRecordKind.DELAY
    assert delay.delay == DelayRecord("orders", 3, pop_time + 9_000)
    assert bad_ck.kind is ReviveRecordKind.MALFORMED
    assert "not JSON" in bad_ck.malformed_reason
    assert (unknown.kind, unknown.tag) == (ReviveRecordKind.MALFORMED, "mystery")
    assert [r.queue_offset for r in page.records] == list(range(6))


async def test_revive_log_scan_pages_and_resumes(admin: BrokerAdmin, broker: Broker) -> None:
    await _revive_log_of_every_kind(broker)
    pages = [page async for page in admin.scan_revive_log(1, page_size=4)]
    assert [len(p.records) for p in pages] == [4, 2]
    assert [(p.next_queue_offset, p.end_of_log) for p in pages] == [(4, False), (6, True)]

    bounded = [p async for p in admin.scan_revive_log(1, page_size=2, max_records=3)]
    assert [len(p.records) for p in bounded] == [2, 1]
    resume = bounded[-1].records[-1].next_queue_offset
    assert resume == bounded[-1].next_queue_offset == 3
    rest = [p async for p in admin.scan_revive_log(1, from_queue_offset=resume)]
    assert [r.queue_offset for p in rest for r in p.records] == [3, 4, 5]

    at_end = [p async for p in admin.scan_revive_log(1, from_queue_offset=6)]
    assert [(len(p.records), p.end_of_log, p.next_queue_offset) for p in at_end] == [(0, True, 6)]
    empty = [p async for p in admin.scan_revive_log(0)]
    assert [(len(p.records), p.end_of_log) for p in empty] == [(0, True)]


async def test_a_caller_may_stop_a_scan_early(admin: BrokerAdmin, broker: Broker) -> None:
    await _revive_log_of_every_kind(broker)
    async for page in admin.scan_revive_log(1, page_size=1):
        assert page.records[0].queue_offset == 0
        break
    assert (await admin.info()).ready  # the channel is still usable


async def test_revive_log_scan_refuses_bad_positions(admin: BrokerAdmin, broker: Broker) -> None:
    await _revive_log_of_every_kind(broker)
    with pytest.raises(errors.OutOfRange):
        async for _ in admin.scan_revive_log(1, from_queue_offset=7):
            pass
    with pytest.raises(errors.NotFound):
        async for _ in admin.scan_revive_log(2):
            pass
    for bad in (
        {"revive_queue_id": -1},
        {"revive_queue_id": 1, "from_queue_offset": -1},
        {"revive_queue_id": 1, "page_size": 5000},
        {"revive_queue_id": 1, "page_size": -1},
        {"revive_queue_id": 1, "max_records": -2},
    ):
        with pytest.raises(errors.InvalidArgument):
            async for _ in admin.scan_revive_log(**bad):
                pass


async def test_offset_table_scan_pages_and_resumes(admin: BrokerAdmin, broker: Broker) -> None:
    await admin.put_topic(Topic("orders", 3, 3))
    await admin.put_group(Group("billing"))
    await admin.put_group(Group("audit"))
    for queue_id in range(3):
        await broker.store.commit_offset(
            group="billing", topic="orders", queue_id=queue_id, queue_offset=0
        )
        await broker.store.commit_offset(
            group="audit", topic="orders", queue_id=queue_id, queue_offset=0
        )
    await broker.store.commit_offset(
        group="audit", topic="gone", queue_id=0, queue_offset=4
    )  # a topic that no longer exists

    pages = [p async for p in admin.scan_offsets(page_size=3)]
    keys = [row.key for p in pages for row in p.rows]
    assert keys == sorted(keys)
    assert len(keys) == 7
    assert [p.end_of_table for p in pages] == [False, False, True]
    assert all(p.resume_after == p.rows[-1].key for p in pages)
    gone = [row for p in pages for row in p.rows if row.key.topic == "gone"]
    assert [(r.queue_exists, r.committed_queue_offset) for r in gone] == [(False, 4)]

    resumed = [p async for p in admin.scan_offsets(start_after=pages[0].resume_after)]
    assert [row.key for p in resumed for row in p.rows] == keys[3:]

    only = [p async for p in admin.scan_offsets(group="billing")]
    assert [r.key for p in only for r in p.rows] == [
        OffsetTableKey("billing", "orders", q) for q in range(3)
    ]
    after_all = [p async for p in admin.scan_offsets(start_after=keys[-1])]
    assert [(len(p.rows), p.end_of_table, p.resume_after) for p in after_all] == [(0, True, None)]


async def test_offset_table_rows_with_store_times(admin: BrokerAdmin, broker: Broker) -> None:
    from popbroker.store.api import MessageToAppend  # noqa: PLC0415

    await admin.put_topic(Topic("orders", 1, 1))
    await admin.put_group(Group("billing"))
    await broker.store.append(
        [MessageToAppend("orders", 0, b"a"), MessageToAppend("orders", 0, b"b")]
    )
    await broker.store.commit_offset(group="billing", topic="orders", queue_id=0, queue_offset=1)
    [page] = [p async for p in admin.scan_offsets(include_store_times=True)]
    [row] = page.rows
    assert (row.min_queue_offset, row.max_queue_offset, row.committed_queue_offset) == (0, 2, 1)
    assert row.oldest_unconsumed_store_time_ms == broker.clock.now_ms
    assert row.in_flight_messages == 0
    [plain] = [p async for p in admin.scan_offsets()]
    assert plain.rows[0].oldest_unconsumed_store_time_ms is None


async def test_offset_table_scan_refuses_bad_requests(admin: BrokerAdmin) -> None:
    with pytest.raises(errors.NotFound):
        async for _ in admin.scan_offsets(group="nobody"):
            pass
    for bad in ({"page_size": -1}, {"page_size": 1025}, {"group": "bad name!"}):
        with pytest.raises(errors.InvalidArgument):
            async for _ in admin.scan_offsets(**bad):
                pass
