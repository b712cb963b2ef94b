"""Live clients and routes."""

from __future__ import annotations

import pytest

from popbroker.services import errors
from popbroker.services.clients import ClientKind, ClientRegistry
from popbroker.services.messages import MessageKind
from popbroker.store.api import ClusterMember, ConsumeMode, ConsumeModeConfig, Permission
from tests.unit.services.conftest import GROUP, TOPIC, Broker, FakeClock


def test_clients_expire_and_terminate(clock: FakeClock) -> None:
    registry = ClientRegistry(clock=clock, expiry_ms=1_000)
    registry.on_settings("c1", kind=ClientKind.SIMPLE_CONSUMER, group="g", topics=("t",))
    registry.on_heartbeat("c2", kind=ClientKind.PUSH_CONSUMER, group="g")
    registry.on_heartbeat("p1", kind=ClientKind.PRODUCER, group=None)
    assert registry.live_clients("g") == ["c1", "c2"]
    clock.advance(600)
    registry.on_heartbeat("c2", kind=ClientKind.PUSH_CONSUMER, group="g")
    clock.advance(600)
    assert registry.live_clients("g") == ["c2"]
    registry.on_termination("c2")
    assert registry.live_clients("g") == []


async def test_route_lists_every_member(broker: Broker) -> None:
    route = await broker.popack.router.route(TOPIC)
    assert [(q.broker_name, q.queue_id, q.perm) for q in route] == [
        ("broker-0", 0, Permission.READ_WRITE),
        ("broker-0", 1, Permission.READ_WRITE),
    ]
    assert route[0].accepted == frozenset({MessageKind.NORMAL})
    await broker.store.set_members(
        [ClusterMember("broker-0", "10.0.0.1:8081"), ClusterMember("broker-1", "10.0.0.2:8081")]
    )
    await broker.popack.config.refresh()
    route = await broker.popack.router.route(TOPIC)
    assert {(q.broker_name, str(q.endpoint)) for q in route} == {
        ("broker-0", "10.0.0.1:8081"),
        ("broker-1", "10.0.0.2:8081"),
    }
    with pytest.raises(errors.TopicNotFound):
        await broker.popack.router.route("unknown")


async def test_assignment_pull_is_exclusive_and_pop_shares(broker: Broker) -> None:
    clients = broker.popack.clients
    for client_id in ("a", "b"):
        clients.on_heartbeat(client_id, kind=ClientKind.PUSH_CONSUMER, group=GROUP)
    router = broker.popack.router
    a = await router.assignment(topic_name=TOPIC, group=GROUP, client_id="a", clients=clients)
    b = await router.assignment(topic_name=TOPIC, group=GROUP, client_id="b", clients=clients)
    assert [q.queue_id for q in a] == [0]
    assert [q.queue_id for q in b] == [1]
    await broker.store.put_consume_mode(ConsumeModeConfig(GROUP, TOPIC, ConsumeMode.POP, 0))
    a = await router.assignment(topic_name=TOPIC, group=GROUP, client_id="a", clients=clients)
    assert [q.queue_id for q in a] == [-1]
