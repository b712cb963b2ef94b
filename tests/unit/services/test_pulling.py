"""Offset-based pulling and offsets (lite pull consumers)."""

from __future__ import annotations

import asyncio

import pytest

from popbroker.pop import errors as pop_errors
from popbroker.services import errors
from popbroker.services.pulling import OffsetPolicy, PullRequest
from tests.unit.services.conftest import GROUP, TOPIC, Broker


def _pull(queue_id: int, queue_offset: int, *, poll_ms: int = 0, group: str = GROUP) -> PullRequest:
    return PullRequest(
        group=group,
        topic=TOPIC,
        queue_id=queue_id,
        queue_offset=queue_offset,
        batch_size=32,
        poll_ms=poll_ms,
    )


async def test_pull_pages_through_a_queue(broker: Broker) -> None:
    receipts = [await broker.send(f"m{i}".encode()) for i in range(6)]
    queue_id = receipts[0].queue_id
    mine = [r for r in receipts if r.queue_id == queue_id]
    puller = broker.popack.puller
    first = await puller.pull(_pull(queue_id, 0))
    assert [m.queue_offset for m in first.messages] == [r.queue_offset for r in mine]
    assert first.next_queue_offset == len(mine)
    at_end = await puller.pull(_pull(queue_id, first.next_queue_offset))
    assert at_end.messages == ()
    assert at_end.next_queue_offset == first.next_queue_offset
    beyond = await puller.pull(_pull(queue_id, 1_000))
    assert beyond.messages == ()
    assert beyond.next_queue_offset == len(mine)


async def test_parked_pull_is_woken_by_a_send_to_its_queue(broker: Broker) -> None:
    popack = broker.popack
    popack.start()
    try:
        first = await broker.send(b"first")
        pull = asyncio.create_task(popack.puller.pull(_pull(first.queue_id, 1, poll_ms=10_000)))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5
        while popack.polling.parked == 0:
            assert loop.time() < deadline
            await asyncio.sleep(0.001)
        for i in range(2):  # round robin: one of them lands in the parked pull's queue
            await broker.send(f"later-{i}".encode())
        result = await asyncio.wait_for(pull, 5)
        assert [m.queue_offset for m in result.messages] == [1]
    finally:
        await popack.stop()


async def test_pull_refusals(broker: Broker) -> None:
    puller = broker.popack.puller
    with pytest.raises(errors.IllegalOffset):
        await puller.pull(_pull(0, -1))
    with pytest.raises(pop_errors.IllegalQueueId):
        await puller.pull(_pull(9, 0))
    with pytest.raises(errors.GroupNotFound):
        await puller.pull(_pull(0, 0, group="nobody"))


async def test_offsets_get_update_and_query(broker: Broker) -> None:
    puller = broker.popack.puller
    with pytest.raises(errors.OffsetNotFound):
        await puller.get_offset(GROUP, TOPIC, 0)
    stamps = []
    for i in range(6):
        receipt = await broker.send(f"m{i}".encode())
        if receipt.queue_id == 0:
            stamps.append((broker.clock(), receipt.queue_offset))
        broker.clock.advance(1_000)
    await puller.update_offset(group=GROUP, topic=TOPIC, queue_id=0, queue_offset=2)
    assert await puller.get_offset(GROUP, TOPIC, 0) == 2
    with pytest.raises(errors.IllegalOffset):
        await puller.update_offset(group=GROUP, topic=TOPIC, queue_id=0, queue_offset=99)
    assert await puller.query_offset(TOPIC, 0, policy=OffsetPolicy.BEGINNING) == 0
    assert await puller.query_offset(TOPIC, 0, policy=OffsetPolicy.END) == len(stamps)
    for stamp_ms, queue_offset in stamps:
        found = await puller.query_offset(
            TOPIC, 0, policy=OffsetPolicy.TIMESTAMP, timestamp_ms=stamp_ms
        )
        assert found == queue_offset
    later = await puller.query_offset(
        TOPIC, 0, policy=OffsetPolicy.TIMESTAMP, timestamp_ms=broker.clock() + 10_000
    )
    assert later == len(stamps)
