"""Pop, ack and commit through the services: fast acks never reach the revive log."""

from __future__ import annotations

from popbroker.store import names
from tests.unit.services.conftest import GROUP, TOPIC, Broker


async def test_receive_then_ack_commits_past_every_batch(broker: Broker) -> None:
    for i in range(6):
        await broker.send(f"m{i}".encode())
    got = await broker.receive()
    assert sorted(m.stored.body for m in got) == [f"m{i}".encode() for i in range(6)]
    assert {m.delivery_attempt for m in got} == {1}
    assert {m.topic for m in got} == {TOPIC}
    for message in got:
        await broker.ack(message)
    await broker.flush()
    for queue_id in (0, 1):
        bounds = await broker.store.bounds(TOPIC, queue_id)
        committed = await broker.store.committed_offset(group=GROUP, topic=TOPIC, queue_id=queue_id)
        assert committed == bounds.max_queue_offset
    revive_topic = names.revive_topic((await broker.store.info()).cluster)
    for queue_id in range(2):
        assert (await broker.store.bounds(revive_topic, queue_id)).max_queue_offset == 0


async def test_in_flight_messages_are_not_handed_out_twice(broker: Broker) -> None:
    for i in range(4):
        await broker.send(f"m{i}".encode())
    first = await broker.receive(batch=3)
    second = await broker.receive(batch=3)
    assert len(first) == 3
    assert len(second) == 1
    assert not {m.stored.body for m in first} & {m.stored.body for m in second}
    assert await broker.receive() == []


async def test_tag_filter_skips_and_commits_past_unmatched(broker: Broker) -> None:
    await broker.send(b"a", tag="red")
    await broker.send(b"b", tag="blue")
    await broker.send(b"c", tag="red")
    got = await broker.receive(filter_expression="red")
    assert sorted(m.stored.body for m in got) == [b"a", b"c"]
    for message in got:
        await broker.ack(message)
    await broker.flush()
    for queue_id in (0, 1):
        bounds = await broker.store.bounds(TOPIC, queue_id)
        assert await broker.store.committed_offset(group=GROUP, topic=TOPIC, queue_id=queue_id) == (
            bounds.max_queue_offset
        )


async def test_acks_after_the_flush_become_ack_records(broker: Broker) -> None:
    await broker.send(b"slow")
    (message,) = await broker.receive(invisible_ms=10_000)
    broker.clock.advance(8_000)  # within 3 s of the deadline: the CK is flushed
    await broker.flush()
    await broker.ack(message)
    broker.clock.advance(3_000)
    await broker.revive_step()
    assert await broker.receive() == []
    worker_stats = [w.ledger.stats() for w in broker.revive.workers]
    assert sum(s.resolved for s in worker_stats) == 1
