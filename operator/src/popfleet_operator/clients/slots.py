"""A bounded number of holders, granted by priority: the round slots of ``handlers.runtime``.

:class:`PrioritySlots` is ``asyncio.Semaphore`` with ordered waiters: when a slot frees up,
the waiter with the lowest priority number gets it, the earliest among equals
(``planning.lanes`` says which number a round gets). A waiter cancelled while it waits gives
nothing up; one cancelled after it was granted a slot hands the slot on.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class PrioritySlots:
    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"need at least one slot, got {limit}")
        self._free = limit
        self._waiting: list[tuple[int, int, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()

    @asynccontextmanager
    async def hold(self, priority: int) -> AsyncIterator[None]:
        await self._acquire(priority)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, priority: int) -> None:
        if self._free > 0:  # a release grants a live waiter first, so none is waiting now
            self._free -= 1
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (priority, next(self._arrivals), granted))
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self._release()  # granted, then cancelled before it ran: pass the slot on
            raise

    def _release(self) -> None:
        while self._waiting:
            _, _, granted = heapq.heappop(self._waiting)
            if not granted.done():
                granted.set_result(None)
                return
        self._free += 1
