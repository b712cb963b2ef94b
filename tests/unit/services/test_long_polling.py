"""Long polling: a parked receive is woken by an arrival; the parking lot is bounded."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

import pytest

from popbroker.services import errors
from popbroker.services.longpolling import LongPolling
from popbroker.services.messages import MessageKind, OutgoingMessage
from popbroker.services.popack import PopackServices
from popbroker.services.popattempt import PopOutcome, PopRequest
from popbroker.services.receiving import ReceiveRequest
from popbroker.services.routing import Endpoint
from tests.unit.services.conftest import GROUP, TOPIC, Broker, send_one


async def _until(predicate: Callable[[], bool], *, timeout_s: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.001)


def _request(poll_ms: int) -> ReceiveRequest:
    return ReceiveRequest(
        group=GROUP, topic=TOPIC, batch_size=8, invisible_ms=10_000, poll_ms=poll_ms
    )


async def test_parked_receive_is_woken_by_a_send(broker: Broker) -> None:
    popack = broker.popack
    popack.start()
    try:
        receive = asyncio.create_task(popack.receiver.receive(_request(10_000)))
        await _until(lambda: popack.polling.parked == 1)
        await broker.send(b"wake")
        got = await asyncio.wait_for(receive, 5)
        assert [m.stored.body for m in got] == [b"wake"]
        assert popack.polling.parked == 0
    finally:
        await popack.stop()


async def test_empty_poll_answers_within_its_budget(broker: Broker) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await broker.popack.receiver.receive(_request(50)) == ()
    assert loop.time() - started < 2


async def test_too_many_parked_requests(broker: Broker) -> None:
    settings = dataclasses.replace(broker.popack.settings, max_parked_requests=1)
    popack = PopackServices(
        store=broker.store,
        settings=settings,
        advertised=Endpoint("127.0.0.1", 1),
        clock=broker.clock,
    )
    first = asyncio.create_task(popack.receiver.receive(_request(10_000)))
    await _until(lambda: popack.polling.parked == 1)
    with pytest.raises(errors.TooManyRequests):
        await popack.receiver.receive(_request(10_000))
    await send_one(
        popack.sender,
        OutgoingMessage(topic=TOPIC, body=b"x", message_id="x", kind=MessageKind.NORMAL),
    )
    popack.polling.notify_arrival(TOPIC)
    assert len(await asyncio.wait_for(first, 5)) == 1


async def test_retry_topic_arrival_wakes_the_group_only() -> None:
    polling = LongPolling()
    with polling.register("t", "g1") as waiter_g1, polling.register("t", "g2") as waiter_g2:
        assert polling.notify_arrival("%RETRY%g1+t") == 1
        assert await waiter_g1.wait(0.01)
        assert not await waiter_g2.wait(0.001)
        assert polling.notify_arrival("rmq_sys_REVIVE_LOG_x") == 0
        assert polling.notify_arrival("t") == 2
    assert polling.parked == 0


async def test_one_arrival_wakes_one_waiter_per_group() -> None:
    polling = LongPolling()
    with polling.register("t", "g") as first, polling.register("t", "g") as second:
        assert polling.notify_arrival("t") == 1
        assert [first.woken, second.woken] == [True, False]
        assert polling.notify_arrival("t") == 1  # the next arrival goes to the next waiter
        assert [first.woken, second.woken] == [True, True]
        assert polling.notify_arrival("t") == 0  # both already have a wake-up pending
        assert await first.wait(0.01)
        assert polling.notify_arrival("t") == 1


async def test_an_arrival_wakes_the_pollers_of_its_queue_not_another_queue() -> None:
    polling = LongPolling()
    with (
        polling.register("t", "g", 1) as on_queue_1,
        polling.register("t", "g", 3) as on_queue_3,
        polling.register("t", "g") as on_all,
    ):
        assert polling.notify_arrival("t", 3) == 2
        assert [on_queue_1.woken, on_queue_3.woken, on_all.woken] == [False, True, True]
        assert polling.notify_arrival("%RETRY%g+t", 0) == 1  # the only key left un-woken
        assert on_queue_1.woken


async def test_an_empty_poll_that_nobody_woke_pops_once(broker: Broker) -> None:
    popper = broker.popack.popper
    attempts = 0
    pop = popper.pop

    async def counted(request: PopRequest) -> PopOutcome:
        nonlocal attempts
        attempts += 1
        return await pop(request)

    popper.pop = counted  # type: ignore[method-assign]
    assert await broker.popack.receiver.receive(_request(50)) == ()
    assert attempts == 1  # no last round of reads after the budget ran out
