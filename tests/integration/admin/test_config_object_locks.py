"""``ObjectLocks``: changes to one config object run one at a time, others concurrently.

The admin servicer holds a topic's, a group's (or both, for a consume mode) lock
between its check and its change, so two calls on the same object never interleave,
while calls on different objects proceed together and share the store's config
rewrites. Locks exist only while held or awaited.
"""

from __future__ import annotations

import asyncio

from popbroker.admin.servicer import ObjectLocks


async def test_one_key_is_exclusive_and_other_keys_are_not() -> None:
    locks = ObjectLocks()
    inside: list[str] = []
    release = asyncio.Event()

    async def hold(name: str, keys: list[str]) -> None:
        async with locks.holding(keys):
            inside.append(name)
            await release.wait()
            inside.remove(name)

    first = asyncio.create_task(hold("first", ["topic/a"]))
    same = asyncio.create_task(hold("same", ["topic/a", "group/g"]))
    other = asyncio.create_task(hold("other", ["topic/b"]))
    while len(inside) < 2:
        await asyncio.sleep(0)  # let the tasks run up to their locks (no time passes)
    assert sorted(inside) == ["first", "other"]
    assert len(locks) == 3  # topic/a (held and awaited), group/g (taken by "same"), topic/b
    release.set()
    await asyncio.gather(first, same, other)
    assert inside == []
    assert len(locks) == 0


async def test_a_cancelled_waiter_leaves_no_lock_behind() -> None:
    locks = ObjectLocks()
    release = asyncio.Event()
    entered = asyncio.Event()
    trying = asyncio.Event()

    async def hold() -> None:
        async with locks.holding(["group/g"]):
            entered.set()
            await release.wait()

    async def wait() -> None:
        trying.set()  # no await between this and the lock's acquire
        async with locks.holding(["group/g"]):
            raise AssertionError("the waiter must not get the lock while it is held")

    holder = asyncio.create_task(hold())
    await entered.wait()
    waiter = asyncio.create_task(wait())
    await trying.wait()
    waiter.cancel()
    release.set()
    await holder
    assert waiter.cancelled()
    assert len(locks) == 0
