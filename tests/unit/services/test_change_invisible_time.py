"""Change of invisible time: a new handle, the old one refused, the new deadline honoured."""

from __future__ import annotations

import pytest

from popbroker.pop import errors as pop_errors
from tests.unit.services.conftest import GROUP, TOPIC, Broker


async def test_change_delays_redelivery_and_supersedes_the_old_handle(broker: Broker) -> None:
    await broker.send(b"x")
    (message,) = await broker.receive(invisible_ms=5_000)
    acker = broker.popack.acker
    new_handle = await acker.change_invisible(
        group=GROUP, topic=TOPIC, receipt_handle=message.receipt_handle, invisible_ms=20_000
    )
    assert new_handle
    assert new_handle != message.receipt_handle
    with pytest.raises(pop_errors.InvalidReceiptHandle):
        await acker.ack(group=GROUP, topic=TOPIC, receipt_handle=message.receipt_handle)
    broker.clock.advance(6_000)  # past the old deadline
    await broker.flush()
    await broker.revive_step()
    assert await broker.receive() == []
    broker.clock.advance(15_000)  # past the new one
    await broker.flush()
    await broker.revive_step()
    (again,) = await broker.receive()
    assert again.delivery_attempt == 2


async def test_ack_with_the_new_handle_prevents_redelivery(broker: Broker) -> None:
    await broker.send(b"a")
    await broker.send(b"b")
    got = await broker.receive(invisible_ms=5_000)
    assert len(got) == 2
    acker = broker.popack.acker
    for message in got:
        handle = await acker.change_invisible(
            group=GROUP, topic=TOPIC, receipt_handle=message.receipt_handle, invisible_ms=8_000
        )
        await acker.ack(group=GROUP, topic=TOPIC, receipt_handle=handle)
    broker.clock.advance(30_000)
    await broker.flush()
    await broker.revive_step()
    assert await broker.receive() == []


async def test_change_to_zero_makes_it_visible_at_the_next_revive(broker: Broker) -> None:
    await broker.send(b"x")
    (message,) = await broker.receive(invisible_ms=60_000)
    await broker.popack.acker.change_invisible(
        group=GROUP, topic=TOPIC, receipt_handle=message.receipt_handle, invisible_ms=0
    )
    broker.clock.advance(1_000)
    await broker.flush()
    await broker.revive_step()
    (again,) = await broker.receive()
    assert again.stored.body == b"x"
