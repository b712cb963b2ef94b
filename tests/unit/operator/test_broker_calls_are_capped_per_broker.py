"""``BrokerPool``: at most ``call_limit`` admin calls per broker under way; the rest queue
*before* the real client is called, so their deadline starts only when they are sent."""

from __future__ import annotations

import asyncio

import pytest

from popfleet_api import errors as admin_errors
from popfleet_api import models
from popfleet_api.testing import InMemoryBrokerAdmin
from popfleet_operator.clients.brokers import BrokerPool


class GatedAdmin(InMemoryBrokerAdmin):
    """``info`` is sent (counted) at once and answers when the test opens ``gate``."""

    def __init__(self, endpoint: str) -> None:
        super().__init__(endpoint)
        self.gate = asyncio.Event()
        self.sent = 0
        self.answered = 0

    async def info(self) -> models.BrokerInfo:
        self.sent += 1
        await self.gate.wait()
        self.answered += 1
        return await super().info()


def gated_pool(limit: int) -> tuple[BrokerPool, dict[str, GatedAdmin]]:
    made: dict[str, GatedAdmin] = {}

    def connect(endpoint: str, token: str | None) -> GatedAdmin:
        made[endpoint] = GatedAdmin(endpoint)
        return made[endpoint]

    return BrokerPool(connect, call_limit=limit), made


async def settle(until: int, admin: GatedAdmin) -> None:
    """Let the event loop run until ``until`` calls were sent to ``admin`` (or nothing moves)."""
    for _ in range(100):
        if admin.sent >= until:
            return
        await asyncio.sleep(0)


async def test_calls_beyond_the_limit_wait_before_they_are_sent() -> None:
    pool, made = gated_pool(limit=3)
    admin = pool.admin("10.0.0.1:9877", None)
    calls = [asyncio.ensure_future(admin.info()) for _ in range(10)]
    real = made["10.0.0.1:9877"]
    await settle(10, real)
    assert real.sent == 3  # seven wait for a slot, not yet sent: no deadline running
    real.gate.set()
    await asyncio.gather(*calls)
    assert (real.sent, real.answered) == (10, 10)


async def test_brokers_have_their_own_slots() -> None:
    pool, made = gated_pool(limit=1)
    first, second = pool.admin("10.0.0.1:9877", None), pool.admin("10.0.0.2:9877", None)
    calls = [asyncio.ensure_future(a.info()) for a in (first, first, second)]
    await settle(1, made["10.0.0.2:9877"])
    assert (made["10.0.0.1:9877"].sent, made["10.0.0.2:9877"].sent) == (1, 1)
    for admin in made.values():
        admin.gate.set()
    await asyncio.gather(*calls)
    assert made["10.0.0.1:9877"].answered == 2


async def test_a_failed_call_gives_its_slot_back() -> None:
    pool, made = gated_pool(limit=1)
    admin = pool.admin("10.0.0.1:9877", None)
    real = made["10.0.0.1:9877"]
    real.unreachable = True
    for _ in range(3):
        with pytest.raises(admin_errors.Unavailable):
            await admin.topics()
    real.unreachable = False
    assert await admin.topics() == []


async def test_the_wrapper_passes_plain_attributes_through() -> None:
    pool, made = gated_pool(limit=1)
    admin = pool.admin("10.0.0.1:9877", None)
    assert admin.target == made["10.0.0.1:9877"].target
    await pool.close()
    assert made["10.0.0.1:9877"].closed
