"""Sends: validation, idempotent repeats, DELAY held until due."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
from collections.abc import Sequence
from typing import Any, cast

import pytest

from popbroker.services import errors
from popbroker.services.messages import MessageKind, OutgoingMessage, SendReceipt
from popbroker.services.sending import Sender
from popbroker.store import errors as store_errors
from popbroker.store.api import AppendResult, MessageToAppend, StoreApi
from tests.unit.services.conftest import TOPIC, Broker, send_one


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
        await send_one(broker.popack.sender, message)


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
        persisted = await broker.persisted_revive_offset(worker.revive_queue_id)
        assert (persisted or 0) == worker.ledger.scanned_end  # None: nothing to persist yet


class _GatedStore:
    """A store whose appends wait for a gate (a slow store, deterministically)."""

    def __init__(self, inner: StoreApi) -> None:
        self.inner = inner
        self.gate = asyncio.Event()
        self.waiting = asyncio.Event()  # an append is at the gate

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def append(self, messages: Sequence[MessageToAppend]) -> list[AppendResult]:
        self.waiting.set()
        await self.gate.wait()
        return await self.inner.append(messages)


def _gated_sender(broker: Broker) -> tuple[Sender, _GatedStore]:
    gated = _GatedStore(broker.store)
    sender = Sender(
        store=cast(StoreApi, gated),
        config=broker.popack.config,
        settings=broker.popack.settings,
        clock=broker.clock,
    )
    return sender, gated


async def test_a_client_giving_up_does_not_cancel_the_append_of_its_retry(broker: Broker) -> None:
    sender, gated = _gated_sender(broker)
    message = OutgoingMessage(TOPIC, b"retried", "RETRIED", MessageKind.NORMAL)
    first = asyncio.create_task(send_one(sender, message))
    await asyncio.sleep(0)  # let the first attempt start its append
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    second = asyncio.create_task(send_one(sender, message))
    gated.gate.set()
    receipt = await asyncio.wait_for(second, 5)
    assert receipt.message_id == "RETRIED"
    assert [m.stored.body for m in await broker.receive()] == [b"retried"]


async def test_an_append_cancelled_under_a_waiting_send_cancels_the_send(broker: Broker) -> None:
    """The broker stopping cancels its appends: a send waiting on one is cancelled too,
    never answered as sent (nor as failed, which a client would not retry the same way)."""
    sender, gated = _gated_sender(broker)
    waiting = asyncio.create_task(sender.send_batch([_normal(b"a", "A"), _normal(b"b", "B")]))
    await asyncio.wait_for(gated.waiting.wait(), 5)
    (append,) = sender._appends
    append.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(waiting, 5)
    assert await broker.receive() == []


class _CountingStore:
    """A store that records every append call (and can fail the next one)."""

    def __init__(self, inner: StoreApi) -> None:
        self.inner = inner
        self.appends: list[int] = []  # records per append call
        self.fail_next: Exception | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def append(self, messages: Sequence[MessageToAppend]) -> list[AppendResult]:
        self.appends.append(len(messages))
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error
        return await self.inner.append(messages)


def _counting_sender(broker: Broker, **settings: int) -> tuple[Sender, _CountingStore]:
    """A sender on a store that counts appends; ``settings`` override popack's."""
    store = _CountingStore(broker.store)
    sender = Sender(
        store=cast(StoreApi, store),
        config=broker.popack.config,
        settings=dataclasses.replace(broker.popack.settings, **settings),  # type: ignore[arg-type]
        clock=broker.clock,
    )
    return sender, store


def _normal(body: bytes, message_id: str, topic: str = TOPIC) -> OutgoingMessage:
    return OutgoingMessage(topic, body, message_id, MessageKind.NORMAL)


async def test_a_batch_is_stored_with_one_append_and_answers_per_message(broker: Broker) -> None:
    sender, store = _counting_sender(broker)
    delayed = OutgoingMessage(
        "mixed", b"later", "D", MessageKind.DELAY, delivery_timestamp_ms=broker.clock() + 5_000
    )
    outcomes = await sender.send_batch(
        [_normal(b"a", "A"), _normal(b"", "EMPTY"), _normal(b"b", "B"), delayed]
    )
    assert store.appends == [3]  # the empty body was refused on its own, not appended
    first, empty, second, held = outcomes
    assert isinstance(empty, store_errors.EmptyBody)
    assert isinstance(first, SendReceipt) and isinstance(second, SendReceipt)
    assert (first.message_id, second.message_id) == ("A", "B")
    assert isinstance(held, SendReceipt) and held.delayed
    assert sorted(m.stored.body for m in await broker.receive()) == [b"a", b"b"]


async def test_a_repeated_message_id_in_and_across_batches_is_stored_once(broker: Broker) -> None:
    sender, store = _counting_sender(broker)
    first = await sender.send_batch([_normal(b"x", "SAME"), _normal(b"x", "SAME")])
    again = await sender.send_batch([_normal(b"x", "SAME"), _normal(b"y", "OTHER")])
    assert first[0] == first[1] == again[0]
    assert store.appends == [1, 1]  # the repeat appended nothing; OTHER alone
    assert sorted(m.stored.body for m in await broker.receive()) == [b"x", b"y"]


async def test_a_failed_batch_append_fails_each_message_and_a_retry_appends(
    broker: Broker,
) -> None:
    sender, store = _counting_sender(broker)
    store.fail_next = store_errors.StoreClosed("store went away")
    batch = [_normal(b"a", "A"), _normal(b"b", "B")]
    outcomes = await sender.send_batch(batch)
    assert all(isinstance(o, store_errors.StoreClosed) for o in outcomes)
    retried = await sender.send_batch(batch)
    assert all(isinstance(o, SendReceipt) for o in retried)
    assert store.appends == [2, 2]
    assert sorted(m.stored.body for m in await broker.receive()) == [b"a", b"b"]


async def test_a_repeat_within_the_window_is_answered_and_one_after_it_is_stored_again(
    broker: Broker,
) -> None:
    sender, store = _counting_sender(broker, send_dedup_window_ms=1_000)
    (first,) = await sender.send_batch([_normal(b"x", "ID")])
    broker.clock.advance(999)
    (repeat,) = await sender.send_batch([_normal(b"x", "ID")])
    assert repeat == first and store.appends == [1]
    broker.clock.advance(1)  # the id's window ends 1 000 ms after its first send
    (again,) = await sender.send_batch([_normal(b"x", "ID")])
    assert isinstance(again, SendReceipt) and again != first
    assert store.appends == [1, 1]


async def test_the_window_keeps_its_newest_ids_up_to_its_size(broker: Broker) -> None:
    sender, store = _counting_sender(broker, send_dedup_max_entries=2)
    for message_id in ("A", "B", "C"):
        await sender.send_batch([_normal(b"x", message_id)])
    await sender.send_batch([_normal(b"x", "C")])  # still in the window: answered
    assert store.appends == [1, 1, 1]
    await sender.send_batch([_normal(b"x", "A")])  # the oldest went: stored again
    assert store.appends == [1, 1, 1, 1]


async def test_a_send_in_progress_stays_in_a_full_window_and_a_repeat_waits_for_it(
    broker: Broker,
) -> None:
    gated = _GatedStore(broker.store)
    sender = Sender(
        store=cast(StoreApi, gated),
        config=broker.popack.config,
        settings=dataclasses.replace(broker.popack.settings, send_dedup_max_entries=1),
        clock=broker.clock,
    )
    first = asyncio.create_task(sender.send_batch([_normal(b"x", "SLOW")]))
    await asyncio.wait_for(gated.waiting.wait(), 5)
    other = asyncio.create_task(sender.send_batch([_normal(b"y", "OTHER")]))
    repeat = asyncio.create_task(sender.send_batch([_normal(b"x", "SLOW")]))
    await asyncio.sleep(0)
    gated.gate.set()
    outcomes = await asyncio.wait_for(asyncio.gather(first, other, repeat), 5)
    assert outcomes[0] == outcomes[2]  # the repeat was answered by the first append
    assert sorted(m.stored.body for m in await broker.receive()) == [b"x", b"y"]


async def test_settled_ids_are_not_tracked_by_the_garbage_collector(broker: Broker) -> None:
    """The window holds up to ``send_dedup_max_entries`` ids for minutes: as objects the
    collector tracks, each full collection walked them all (pauses of 100-400 ms)."""
    sender, _ = _counting_sender(broker)
    await sender.send_batch([_normal(b"x", f"ID{i}") for i in range(32)])
    gc.collect()  # the collector stops tracking tuples of untracked values when it sees them
    entries = list(sender._sent.items())
    assert len(entries) == 32
    assert not any(gc.is_tracked(key) or gc.is_tracked(entry) for key, entry in entries)
