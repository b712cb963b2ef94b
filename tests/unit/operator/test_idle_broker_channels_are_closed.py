"""The broker pool closes channels no round used for ``idle_s`` and keeps the used ones."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from popfleet_api.testing import InMemoryBrokerAdmin
from popfleet_operator.clients.brokers import BrokerPool
from popfleet_operator.handlers import runtime
from popfleet_operator.model.observations import BrokerPod
from popfleet_operator.status import conditions as c


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def pool(clock: Clock) -> tuple[BrokerPool, dict[str, InMemoryBrokerAdmin]]:
    made: dict[str, InMemoryBrokerAdmin] = {}

    def connect(endpoint: str, token: str | None) -> InMemoryBrokerAdmin:
        made[endpoint] = InMemoryBrokerAdmin(endpoint)
        return made[endpoint]

    return BrokerPool(connect, idle_s=600.0, clock=clock), made


def pod(name: str, ip: str) -> BrokerPod:
    return BrokerPod(name=name, ordinal=int(name[-1]), pod_ip=ip, ready=True)


async def test_a_channel_idle_past_the_limit_is_closed_and_a_used_one_kept() -> None:
    clock = Clock()
    brokers, made = pool(clock)
    first = brokers.for_pods([pod("demo-0", "10.0.0.1"), pod("demo-1", "10.0.0.2")], None)
    clock.now_s += 400
    brokers.for_pods([pod("demo-0", "10.0.0.1"), pod("demo-1", "10.0.0.9")], None)  # moved
    clock.now_s += 300  # old demo-1 IP: 700 s unused; demo-0: 300 s
    await brokers.close_idle()
    assert made["10.0.0.2:9877"].closed
    assert not made["10.0.0.1:9877"].closed and not made["10.0.0.9:9877"].closed
    again = brokers.for_pods([pod("demo-0", "10.0.0.1")], None)
    assert again["demo-0"] is first["demo-0"]  # kept, reused, not redialled
    assert sorted(made) == ["10.0.0.1:9877", "10.0.0.2:9877", "10.0.0.9:9877"]


async def test_every_reconcile_round_closes_the_idle_channels() -> None:
    clock = Clock()
    brokers, made = pool(clock)
    brokers.for_pods([pod("demo-0", "10.0.0.1")], None)
    clock.now_s += 601
    memo: dict[str, Any] = {"runtime": runtime.Runtime(kube=None, pool=brokers)}  # type: ignore[arg-type]

    async def reconcile() -> list[c.Condition]:
        return [c.Condition(c.READY, True, c.RECONCILED)]

    log = logging.getLogger("test")
    await runtime.reconcile_round(
        "Topic", memo=memo, patch=kopf.Patch(), logger=log, retry=None, reconcile=reconcile
    )
    assert made["10.0.0.1:9877"].closed
