"""GetOffsets and GetReviveStats from a store the roles have written to."""

from __future__ import annotations

from popbroker.pop import records
from popbroker.store import names
from popbroker.store.api import MessageToAppend
from popfleet_api.client import BrokerAdmin
from popfleet_api.models import ConsumeMode, Group, QueueOffsets, Topic
from tests.integration.admin.conftest import NOW_MS, REVIVE_QUEUES, Broker
from tests.integration.admin.revivelogs import (
    REVIVE_TOPIC,
    append_record,
    checkpoint,
    set_revive_progress,
)


async def _send(broker: Broker, topic: str, queue_id: int, count: int) -> None:
    for _ in range(count):
        await broker.store.append([MessageToAppend(topic, queue_id, b"x")])
        broker.clock.now_ms += 1_000


async def test_offsets_per_queue_with_committed_in_flight_and_oldest(
    admin: BrokerAdmin, broker: Broker
) -> None:
    await admin.put_topic(Topic("orders", 2, 2))
    await admin.put_group(Group("billing"))
    await _send(broker, "orders", 0, 5)  # store times NOW_MS + 0..4 s
    await _send(broker, "orders", 1, 2)  # NOW_MS + 5..6 s
    await broker.store.commit_offset(group="billing", topic="orders", queue_id=0, queue_offset=2)
    # Offsets 2 and 3 of queue 0 are popped and invisible; offset 2 is acked through the log.
    ck = checkpoint((2, 3), pop_time_ms=broker.clock.now_ms)
    await append_record(broker.store, ck, revive_queue_id=0)
    await append_record(broker.store, records.ack_for(ck.key, (2,)), revive_queue_id=0)

    offsets = await admin.offsets("billing")
    assert offsets.group == "billing"
    assert offsets.now_ms == broker.clock.now_ms
    assert offsets.queues == (
        QueueOffsets("orders", 0, 0, 5, 2, 1, NOW_MS + 2_000),
        QueueOffsets("orders", 1, 0, 2, None, 0, NOW_MS + 5_000),
    )
    assert [q.lag_messages for q in offsets.queues] == [3, None]  # queue 1: never committed
    assert [q.unconsumed_messages for q in offsets.queues] == [3, 2]


async def test_offsets_include_the_retry_topic_and_explicit_topics(
    admin: BrokerAdmin, broker: Broker
) -> None:
    await admin.put_topic(Topic("orders", 1, 1))
    await admin.put_topic(Topic("refunds", 1, 1))
    await admin.put_group(Group("billing"))
    await admin.set_consume_mode("billing", "orders", mode=ConsumeMode.POP)
    retry = names.retry_topic("billing", "orders")
    await broker.store.append([MessageToAppend(retry, 0, b"again")])

    by_mode = await admin.offsets("billing")
    assert [(q.topic, q.retry_of) for q in by_mode.queues] == [(retry, "orders"), ("orders", "")]
    explicit = await admin.offsets("billing", ["refunds"])
    assert [q.topic for q in explicit.queues] == ["refunds"]


async def test_revive_stats_from_the_store(admin: BrokerAdmin, broker: Broker) -> None:
    await admin.put_topic(Topic("orders", 1, 1))
    await admin.put_group(Group("billing"))
    await admin.put_group(Group("idle"))
    start = broker.clock.now_ms
    due = checkpoint((0,), pop_time_ms=start - 120_000, invisible_ms=60_000)
    await append_record(broker.store, due, revive_queue_id=1)  # store time = start
    broker.clock.now_ms += 1_000
    live = checkpoint((1, 2), pop_time_ms=start, invisible_ms=60_000, revive_queue_id=1)
    await append_record(broker.store, live, revive_queue_id=1)
    await append_record(broker.store, records.ack_for(live.key, (9,)), revive_queue_id=1)
    await set_revive_progress(broker.store, 1, 0)
    retry = names.retry_topic("billing", "orders")
    await broker.store.append([MessageToAppend(retry, 0, b"r1"), MessageToAppend(retry, 0, b"r2")])
    await broker.store.commit_offset(group="billing", topic=retry, queue_id=0, queue_offset=1)
    await broker.store.append([MessageToAppend(names.dlq_topic("billing"), 0, b"dead")])
    broker.clock.now_ms += 4_000

    stats = await admin.revive_stats()
    assert stats.revive_topic == REVIVE_TOPIC
    assert stats.now_ms == broker.clock.now_ms
    assert [q.revive_queue_id for q in stats.queues] == list(range(REVIVE_QUEUES))
    idle, busy = stats.queues
    assert (idle.max_queue_offset, idle.revive_queue_offset, idle.lag_messages) == (0, None, 0)
    assert idle.lag_ms == 0
    assert (busy.max_queue_offset, busy.revive_queue_offset, busy.lag_messages) == (3, 0, 3)
    assert busy.lag_ms == 5_000
    assert busy.ledger is not None
    assert busy.ledger.pending_checkpoints == 2
    assert busy.ledger.bogus_ack_offsets == 1
    assert [(g.group, g.retry_messages, g.dlq_messages) for g in stats.groups] == [
        ("billing", 1, 1),
        ("idle", 0, 0),
    ]
    assert stats.checkpoint_buffer is None  # only the popack role knows it

    offsets = await admin.offsets("billing", ["orders"])
    [orders] = [q for q in offsets.queues if q.topic == "orders"]
    assert orders.in_flight_messages == 2  # the live CK; the due one is no longer invisible


async def test_store_pop_state_reads_the_newest_records_within_its_budget(broker: Broker) -> None:
    from popbroker.inspect.popstate import StorePopState  # noqa: PLC0415
    from popbroker.pop.checkpoints import QueueKey  # noqa: PLC0415

    now = broker.clock.now_ms
    for start in (0, 10, 20):  # three live CKs of two messages each, oldest first
        ck = checkpoint((start, start + 1), pop_time_ms=now, invisible_ms=60_000)
        await append_record(broker.store, ck, revive_queue_id=0)
    key = QueueKey("orders", "billing", 0)
    everything = StorePopState(broker.store, clock=broker.clock)
    assert await everything.in_flight([key]) == {key: 6}
    window = StorePopState(broker.store, clock=broker.clock, max_scan_records=2)
    assert await window.in_flight([key]) == {key: 4}
    ledgers = await window.revive_ledgers()
    assert ledgers[0].pending == 2
    assert await window.checkpoint_buffer() is None
