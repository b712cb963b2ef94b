"""The popack role's in-memory state, shared by its services.

Everything a crash may lose lives here, and losing it is safe by design
(DESIGN §3.2): buffered checkpoints were never committed past, so their
messages are popped again from the original queues; superseded handles only
make old handles acceptable again; FIFO order info falls back to "only an ack
at the committed offset advances it"; the in-flight counts start empty (a
queue is popped sooner, never later).

Concurrency: the services run on one asyncio loop and call the pure core's
synchronous methods without awaiting in between, so no mutex guards the
buffer. The queue locks are held *across* awaits (a pop's store read); they
are non-blocking for pops and awaitable (bounded) for FIFO acks, which must
not be skipped.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

from popbroker.pop import invisibility, orderinfo
from popbroker.pop.checkpointbuffer import CheckpointBuffer
from popbroker.pop.checkpoints import QueueKey
from popbroker.pop.popping import InflightCounter
from popbroker.pop.queuelocks import QueueLocks
from popbroker.services.settings import Clock


class QueueLockTable:
    """:class:`QueueLocks` plus an awaitable acquire with a deadline."""

    def __init__(self, clock: Clock, *, stale_after_ms: int = 60_000) -> None:
        self._clock = clock
        self._locks = QueueLocks(stale_after_ms=stale_after_ms)
        self._released = asyncio.Event()

    def try_lock(self, key: QueueKey) -> int | None:
        """The lock's token, or None when another holder has it."""
        return self._locks.try_lock(key, self._clock())

    def unlock(self, key: QueueKey, token: int) -> None:
        """Release ``key`` (a stale token is ignored) and wake waiters."""
        if self._locks.unlock(key, token):
            released, self._released = self._released, asyncio.Event()
            released.set()

    async def lock(self, key: QueueKey, *, timeout_s: float) -> int | None:
        """Wait up to ``timeout_s`` for the lock; None when it stayed held."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            token = self.try_lock(key)
            if token is not None:
                return token
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None
            try:
                await asyncio.wait_for(self._released.wait(), remaining)
            except TimeoutError:
                return None

    def __len__(self) -> int:
        return len(self._locks)


@dataclass
class PopState:
    """Mutable state of one popack role (see the module docstring)."""

    clock: Clock
    buffer: CheckpointBuffer
    locks: QueueLockTable
    superseded: invisibility.SupersededHandles = field(
        default_factory=invisibility.SupersededHandles
    )
    order_infos: dict[QueueKey, orderinfo.OrderInfo] = field(default_factory=dict)
    inflight: InflightCounter = field(default_factory=InflightCounter)
    rng: random.Random = field(default_factory=random.Random)  # noqa: S311 - queue choice, not secrets
    request_seq: int = 0

    def next_request_seq(self) -> int:
        """A per-broker request counter (round-robin of revive queues)."""
        self.request_seq += 1
        return self.request_seq
