"""Un-acked messages come back through the retry topic; past the maximum, the DLQ."""

from __future__ import annotations

import pytest

from popbroker.pop import retrytopics
from popbroker.store.errors import NotLeader
from tests.unit.services.conftest import GROUP, TOPIC, Broker


async def _expire(broker: Broker, invisible_ms: int) -> None:
    broker.clock.advance(invisible_ms)
    await broker.flush()
    broker.clock.advance(1_000)
    await broker.revive_step()


async def test_unacked_message_returns_with_delivery_attempt_plus_one(broker: Broker) -> None:
    await broker.send(b"x", message_id="MSG-1")
    (first,) = await broker.receive(invisible_ms=5_000)
    assert await broker.receive() == []
    await _expire(broker, 5_000)
    (again,) = await broker.receive()
    assert again.delivery_attempt == 2
    assert again.topic == TOPIC
    assert again.stored.topic == retrytopics.retry_topic(GROUP, TOPIC)
    assert again.stored.body == b"x"
    assert again.stored.properties["UNIQ_KEY"] == "MSG-1"
    assert again.receipt_handle != first.receipt_handle
    await broker.ack(again)
    await _expire(broker, 10_000)
    assert await broker.receive() == []


async def test_dead_letter_after_max_reconsume_times_exactly_once(broker: Broker) -> None:
    await broker.send(b"poison")
    attempts: list[int] = []
    for _ in range(5):
        got = await broker.receive(invisible_ms=5_000)
        attempts.extend(m.delivery_attempt for m in got)
        await _expire(broker, 5_000)
    assert attempts == [1, 2, 3]  # max_reconsume_times = 2
    dlq = await broker.store.read(retrytopics.dlq_topic(GROUP), 0, 0, max_count=10)
    assert [m.body for m in dlq.messages] == [b"poison"]
    assert dlq.messages[0].reconsume_times == 3


async def test_revive_progress_is_persisted_past_resolved_records(broker: Broker) -> None:
    for i in range(3):
        await broker.send(f"m{i}".encode())
    got = await broker.receive(invisible_ms=5_000)
    broker.clock.advance(4_000)
    await broker.flush()  # CKs are durable now; the acks below become ACK records
    for message in got:
        await broker.ack(message)
    broker.clock.advance(2_000)
    await broker.revive_step()
    for worker in broker.revive.workers:
        assert worker.ledger.stats().pending == 0
        persisted = await broker.persisted_revive_offset(worker.revive_queue_id)
        assert (persisted or 0) == worker.ledger.scanned_end  # None: nothing to persist yet
    assert await broker.receive() == []


async def test_only_the_unacked_messages_of_a_batch_come_back(broker: Broker) -> None:
    for i in range(10):
        await broker.send(f"m{i}".encode())
    got = await broker.receive(invisible_ms=5_000)
    assert len(got) == 10
    for message in got:
        if int(message.stored.body[1:]) % 2 == 0:
            await broker.ack(message)
    await _expire(broker, 5_000)
    again = await broker.receive()
    assert sorted(m.stored.body for m in again) == [f"m{i}".encode() for i in (1, 3, 5, 7, 9)]
    assert {m.delivery_attempt for m in again} == {2}


async def test_a_followers_revive_idles_and_revives_once_its_replica_leads(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the store refuses writes as a follower's does (``NotLeader``), a due checkpoint
    is put back untried: no attempt counted, no back-off. Once the replica leads, the
    message comes back once, as its second delivery."""
    for i in range(3):
        await broker.send(f"m{i}".encode())
    got = await broker.receive(invisible_ms=5_000)
    assert len(got) == 3
    broker.clock.advance(5_000)
    await broker.flush()
    broker.clock.advance(1_000)

    async def refused(*_args: object, **_kwargs: object) -> object:
        raise NotLeader("broker-0 does not lead its broker set now")

    with monkeypatch.context() as patched:
        patched.setattr(broker.store, "append", refused)
        for _ in range(3):
            with pytest.raises(NotLeader):
                await broker.revive_step()
    for worker in broker.revive.workers:
        assert worker.ledger.stats().in_flight == 0  # every task put back
    assert await broker.receive() == []

    await broker.revive_step()  # leading now: no back-off was added while following
    again = await broker.receive()
    assert sorted(m.stored.body for m in again) == [b"m0", b"m1", b"m2"]
    assert {m.delivery_attempt for m in again} == {2}
