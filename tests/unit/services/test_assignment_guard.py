"""A push consumer pops only the queues its current assignment holds (DESIGN §3.3).

After a rebalance a push consumer's receive for its old queue may still be
parked; it must not pop that queue (now another consumer's in PULL mode), and
the wake-up it took must reach the queue's new consumer. The router reads
consume modes at most once per TTL, so this check costs no store round trip
per receive.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from popbroker.services.clients import ClientKind
from popbroker.services.configcache import ConfigCache
from popbroker.services.receiving import ReceiveRequest
from popbroker.services.routing import Endpoint, Router
from popbroker.store.api import ConsumeMode, ConsumeModeConfig
from tests.unit.services.conftest import GROUP, TOPIC, Broker


async def _until(predicate: Callable[[], bool], *, timeout_s: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.001)


def _push_receive(broker: Broker, client_id: str, queue_id: int, poll_ms: int) -> ReceiveRequest:
    request = ReceiveRequest(
        group=GROUP,
        topic=TOPIC,
        batch_size=8,
        invisible_ms=10_000,
        queue_id=queue_id,
        honour_queue_id=True,
        poll_ms=poll_ms,
    )
    return broker.popack.router.guarded(request, client_id=client_id, clients=broker.popack.clients)


async def _holds(broker: Broker, client_id: str, queue_id: int) -> bool:
    return await broker.popack.router.holds(
        topic_name=TOPIC,
        group=GROUP,
        client_id=client_id,
        queue_id=queue_id,
        clients=broker.popack.clients,
    )


def _join(broker: Broker, client_id: str) -> None:
    broker.popack.clients.on_heartbeat(client_id, kind=ClientKind.PUSH_CONSUMER, group=GROUP)


async def test_holds_follows_mode_and_live_clients(broker: Broker) -> None:
    _join(broker, "a")
    assert [await _holds(broker, "a", q) for q in (0, 1, -1)] == [True, True, False]
    _join(broker, "b")
    assert [await _holds(broker, "a", q) for q in (0, 1, -1)] == [True, False, False]
    assert [await _holds(broker, "b", q) for q in (0, 1, -1)] == [False, True, False]
    await broker.store.put_consume_mode(ConsumeModeConfig(GROUP, TOPIC, ConsumeMode.POP, 0))
    assert [await _holds(broker, "a", q) for q in (0, 1, -1)] == [True, True, True]


async def test_unassigned_push_receive_pops_nothing(broker: Broker) -> None:
    _join(broker, "a")
    _join(broker, "b")  # PULL: a holds queue 0, b queue 1
    receipt = await broker.send(b"first")
    assert receipt.queue_id == 1
    assert await broker.popack.receiver.receive(_push_receive(broker, "a", 1, poll_ms=20)) == ()
    got = await broker.popack.receiver.receive(_push_receive(broker, "b", 1, poll_ms=20))
    assert [m.stored.body for m in got] == [b"first"]


async def test_stale_parked_receive_hands_its_wake_up_to_the_new_owner(broker: Broker) -> None:
    popack = broker.popack
    popack.start()
    try:
        _join(broker, "a")  # alone: a holds both queues and parks on queue 1
        stale = asyncio.create_task(popack.receiver.receive(_push_receive(broker, "a", 1, 300)))
        await _until(lambda: popack.polling.parked == 1)
        _join(broker, "b")  # rebalance: queue 1 is b's now
        owner = asyncio.create_task(popack.receiver.receive(_push_receive(broker, "b", 1, 10_000)))
        await _until(lambda: popack.polling.parked == 2)
        assert (await broker.send(b"for-b")).queue_id == 1  # wakes a's (older) waiter first
        got = await asyncio.wait_for(owner, 5)  # long before b's own 10 s budget ends
        assert [m.stored.body for m in got] == [b"for-b"]
        assert await asyncio.wait_for(stale, 5) == ()
    finally:
        await popack.stop()


async def test_consume_modes_are_reread_once_per_ttl(broker: Broker) -> None:
    router = Router(
        config=ConfigCache(broker.store, clock=broker.clock, ttl_ms=1_000),
        broker_name="broker-0",
        advertised=Endpoint("127.0.0.1", 8081),
    )
    _join(broker, "a")
    _join(broker, "b")

    async def assigned() -> list[int]:
        found = await router.assignment(
            topic_name=TOPIC, group=GROUP, client_id="a", clients=broker.popack.clients
        )
        return [q.queue_id for q in found]

    assert await assigned() == [0]
    await broker.store.put_consume_mode(ConsumeModeConfig(GROUP, TOPIC, ConsumeMode.POP, 0))
    broker.clock.advance(999)
    assert await assigned() == [0]  # still the mode read a moment ago
    broker.clock.advance(1)
    assert await assigned() == [-1]


async def test_push_receive_pops_its_queue_only_and_minus_one_pops_all(broker: Broker) -> None:
    _join(broker, "a")  # alone: holds both queues
    landed = {(await broker.send(f"m{i}".encode())).queue_id for i in range(4)}
    assert landed == {0, 1}
    got = await broker.popack.receiver.receive(_push_receive(broker, "a", 1, poll_ms=0))
    assert {m.stored.queue_id for m in got} == {1}
    assert len(got) == 2
    await broker.store.put_consume_mode(ConsumeModeConfig(GROUP, TOPIC, ConsumeMode.POP, 0))
    got = await broker.popack.receiver.receive(_push_receive(broker, "a", -1, poll_ms=0))
    assert {m.stored.queue_id for m in got} == {0}  # queue 1's two are in flight
    assert len(got) == 2
