"""Sends: validation, idempotent repeats, DELAY held until due."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, cast

import pytest

from popbroker.services import errors
from popbroker.services.messages import MessageKind, OutgoingMessage
from popbroker.services.sending import Sender
from popbroker.store import errors as store_errors
from popbroker.store.api import AppendResult, MessageToAppend, StoreApi
from tests.unit.services.conftest import TOPIC, Broker


async def test_repeated_message_id_is_stored_once(broker: Broker) -> None:
    first = await broker.send(b"once", message_id="SAME")
    second = await broker.send(b"once", message_id="SAME")
    assert first == second
    assert len(await broker.receive()) == 1


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (OutgoingMessage(TOPIC, b"", "m", MessageKind.NORMAL), store_errors.EmptyBody),
        (
            OutgoingMessage(TOPIC, b"x" * (4 * 1024 * 1024 + 1), "m", MessageKind.NORMAL),
            store_errors.MessageTooLarge,
        ),
        (OutgoingMessage("nope", b"x", "m", MessageKind.NORMAL), errors.TopicNotFound),
        (OutgoingMessage("%DLQ%x", b"x", "m", MessageKind.NORMAL), errors.TopicNotFound),
        (OutgoingMessage(TOPIC, b"x", " ", MessageKind.NORMAL), errors.IllegalMessage),
        (OutgoingMessage(TOPIC, b"x", "m", MessageKind.NORMAL, tag="a|b"), errors.IllegalMessage),
        (
            OutgoingMessage(TOPIC, b"x", "m", MessageKind.FIFO, message_group="g"),
            errors.MessageTypeConflict,
        ),
        (OutgoingMessage(TOPIC, b"x", "m", MessageKind.TRANSACTION), errors.Unsupported),
        (
            OutgoingMessage(
                TOPIC, b"x", "m", MessageKind.NORMAL, user_properties={"UNIQ_KEY": "z"}
            ),
            errors.IllegalMessage,
        ),
        (
            OutgoingMessage(
                TOPIC, b"x", "m", MessageKind.NORMAL, user_properties={"k": "v" * 20_000}
            ),
            errors.PropertiesTooLarge,
        ),
        (OutgoingMessage("mixed", b"x", "m", MessageKind.DELAY), errors.IllegalDeliveryTime),
    ],
)
async def test_invalid_sends_are_refused(
    broker: Broker, message: OutgoingMessage, error: type[Exception]
) -> None:
    with pytest.raises(error):
        await broker.popack.sender.send(message)


async def test_delay_message_is_delivered_when_due(broker: Broker) -> None:
    receipt = await broker.send(
        b"later",
        topic="mixed",
        kind=MessageKind.DELAY,
        delivery_timestamp_ms=broker.clock() + 5_000,
    )
    assert receipt.delayed
    await broker.revive_step()
    assert await broker.receive(topic="mixed") == []
    broker.clock.advance(5_000)
    await broker.revive_step()
    (message,) = await broker.receive(topic="mixed")
    assert message.stored.body == b"later"
    for worker in broker.revive.workers:
        assert len(worker.delays) == 0
        assert worker.persisted_offset == worker.ledger.scanned_end


class _GatedStore:
    """A store whose appends wait for a gate (a slow store, deterministically)."""

    def __init__(self, inner: StoreApi) -> None:
        self.inner = inner
        self.gate = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def append(self, messages: Sequence[MessageToAppend]) -> list[AppendResult]:
        await self.gate.wait()
        return await self.inner.append(messages)


async def test_a_client_giving_up_does_not_cancel_the_append_of_its_retry(broker: Broker) -> None:
    gated = _GatedStore(broker.store)
    sender = Sender(
        store=cast(StoreApi, gated),
        config=broker.popack.config,
        settings=broker.popack.settings,
        clock=broker.clock,
    )
    message = OutgoingMessage(TOPIC, b"retried", "RETRIED", MessageKind.NORMAL)
    first = asyncio.create_task(sender.send(message))
    await asyncio.sleep(0)  # let the first attempt start its append
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    second = asyncio.create_task(sender.send(message))
    gated.gate.set()
    receipt = await asyncio.wait_for(second, 5)
    assert receipt.message_id == "RETRIED"
    assert [m.stored.body for m in await broker.receive()] == [b"retried"]
