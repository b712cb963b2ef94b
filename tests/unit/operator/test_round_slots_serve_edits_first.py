"""Round slots (``clients.slots.PrioritySlots``) and their lanes (``planning.lanes``).

A user's edit arriving behind a burst of new objects gets the next free slot; new objects go
before resync ticks; arrival order holds within a lane; cancellation neither leaks nor
swallows a slot.
"""

from __future__ import annotations

import asyncio

import pytest

from popfleet_operator.clients.slots import PrioritySlots
from popfleet_operator.planning import lanes

SYNCED = {"observedGeneration": 3}


@pytest.mark.parametrize(
    ("tick", "generation", "status", "want"),
    [
        (False, 1, {}, lanes.NEW),  # created, never confirmed
        (False, 2, {}, lanes.EDIT),  # edited before its first round confirmed it
        (False, 4, SYNCED, lanes.EDIT),  # edited after being confirmed for generation 3
        (False, 3, SYNCED, lanes.BACKGROUND),  # resumed after a restart, nothing new
        (True, 4, SYNCED, lanes.BACKGROUND),  # a resync tick, even of an unconfirmed edit
        (True, 1, {}, lanes.BACKGROUND),
    ],
)
def test_lane_of_a_round(tick: bool, generation: int, status: dict[str, int], want: int) -> None:
    assert lanes.lane(tick=tick, generation=generation, status=status) == want


async def _take(slots: PrioritySlots, priority: int, name: str, order: list[str]) -> None:
    async with slots.hold(priority):
        order.append(name)
        await asyncio.sleep(0)


async def _queue(
    slots: PrioritySlots, *entries: tuple[int, str]
) -> tuple[list[str], list[asyncio.Task[None]]]:
    order: list[str] = []
    tasks = []
    for priority, name in entries:
        tasks.append(asyncio.create_task(_take(slots, priority, name, order)))
        await asyncio.sleep(0)  # each arrives (and queues) before the next
    return order, tasks


async def test_an_edit_behind_a_burst_gets_the_next_slot() -> None:
    slots = PrioritySlots(1)
    async with slots.hold(lanes.NEW):  # the slot is busy while everything below queues
        order, tasks = await _queue(
            slots,
            (lanes.BACKGROUND, "tick-a"),
            *[(lanes.NEW, f"new-{i}") for i in range(5)],
            (lanes.EDIT, "edit"),
            (lanes.BACKGROUND, "tick-b"),
            (lanes.EDIT, "edit-later"),
        )
        assert order == []
    await asyncio.gather(*tasks)
    assert order == [
        "edit", "edit-later", "new-0", "new-1", "new-2", "new-3", "new-4", "tick-a", "tick-b",
    ]  # fmt: skip


async def test_no_more_than_the_limit_hold_at_once() -> None:
    slots = PrioritySlots(3)
    holding = peak = 0
    release = asyncio.Event()

    async def one() -> None:
        nonlocal holding, peak
        async with slots.hold(lanes.NEW):
            holding += 1
            peak = max(peak, holding)
            await release.wait()
            holding -= 1

    tasks = [asyncio.create_task(one()) for _ in range(10)]
    for _ in range(5):
        await asyncio.sleep(0)
    assert holding == 3
    release.set()
    await asyncio.gather(*tasks)
    assert peak == 3
    async with slots.hold(lanes.NEW), slots.hold(lanes.NEW), slots.hold(lanes.NEW):
        pass  # all three came back


async def test_a_waiter_cancelled_while_waiting_takes_no_slot() -> None:
    slots = PrioritySlots(1)
    order: list[str] = []
    async with slots.hold(lanes.NEW):
        _, cancelled = await _queue(slots, (lanes.EDIT, "cancelled"))
        order, tasks = await _queue(slots, (lanes.NEW, "next"))
        cancelled[0].cancel()
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    assert order == ["next"]
    with pytest.raises(asyncio.CancelledError):
        await cancelled[0]
    async with slots.hold(lanes.NEW):  # the one slot is free again
        pass


async def test_a_waiter_cancelled_after_its_grant_passes_the_slot_on() -> None:
    slots = PrioritySlots(1)
    holder = slots.hold(lanes.NEW)
    await holder.__aenter__()
    _, granted_then_cancelled = await _queue(slots, (lanes.EDIT, "gone"))
    order, tasks = await _queue(slots, (lanes.NEW, "next"))
    await holder.__aexit__(None, None, None)  # grants "gone" ...
    granted_then_cancelled[0].cancel()  # ... which is cancelled before it runs
    await asyncio.gather(*tasks)
    assert order == ["next"]
    with pytest.raises(asyncio.CancelledError):
        await granted_then_cancelled[0]


def test_at_least_one_slot() -> None:
    with pytest.raises(ValueError, match="at least one slot"):
        PrioritySlots(0)
