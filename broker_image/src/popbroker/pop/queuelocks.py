"""Queue locks: non-blocking, timed, token-checked locks per (topic, group, queue).

Purpose: several POP consumers may visit the same queue at once (POP mode
shares queues, fact sheet §5.4). A pop must compute the pop offset, read and
register its checkpoint without another pop of the same queue interleaving,
or both would hand out the same offsets. Upstream uses a map of
``topic@group@queue`` → timed boolean (fact sheet §1.6); contention is never
waited on: the pop skips the queue and counts its backlog in ``rest_num``.

Decisions:

  * Keys are :class:`~popbroker.pop.checkpoints.QueueKey` tuples, never
    ``"@"``-joined strings (a topic or group containing ``@`` cannot collide).
  * Lock expiry: a lock held longer than ``stale_after_ms`` (default 60 s,
    like upstream's self-healing sweep) is treated as leaked (its holder
    crashed or forgot to unlock): the next ``try_lock`` takes it over and
    counts a ``takeover``. Unlike upstream, which deletes held entries in a
    background sweep and may "duplicate lock", a takeover issues a **new
    token**, so the leaked holder's late ``unlock`` is refused instead of
    releasing the new holder's lock.
  * Unlocked entries are deleted at once, so the table holds only held locks
    (its size is bounded by concurrent pops). A leaked entry stays until the
    next ``try_lock`` of its key takes it over; no background sweep is needed,
    since a pop always unlocks in a ``finally``.

Concurrency: none here. The caller serialises every call (one lock in the
services layer, or the single asyncio loop); a pop holds the *queue* lock
across its awaited store read, not the services' mutex.

Callers: the popack services (pop, offset commit, FIFO ack and FIFO
change-invisible).
"""

from __future__ import annotations

from dataclasses import dataclass

from popbroker.pop.checkpoints import QueueKey

DEFAULT_STALE_AFTER_MS = 60_000


@dataclass(frozen=True, slots=True)
class _Held:
    token: int
    locked_at_ms: int


class QueueLocks:
    """The lock table (see the module docstring)."""

    def __init__(self, *, stale_after_ms: int = DEFAULT_STALE_AFTER_MS) -> None:
        if stale_after_ms <= 0:
            raise ValueError("stale_after_ms must be positive")
        self._stale_after_ms = stale_after_ms
        self._held: dict[QueueKey, _Held] = {}
        self._next_token = 1
        self.takeovers = 0

    def try_lock(self, key: QueueKey, now_ms: int) -> int | None:
        """Take the lock of ``key`` without waiting; return its token, or None if held.

        A lock held for ``stale_after_ms`` or longer is taken over.
        """
        held = self._held.get(key)
        if held is not None:
            if now_ms - held.locked_at_ms < self._stale_after_ms:
                return None
            self.takeovers += 1
        token = self._next_token
        self._next_token += 1
        self._held[key] = _Held(token=token, locked_at_ms=now_ms)
        return token

    def unlock(self, key: QueueKey, token: int) -> bool:
        """Release ``key`` if ``token`` still owns it; False for a stale or unknown token."""
        held = self._held.get(key)
        if held is None or held.token != token:
            return False
        del self._held[key]
        return True

    def __len__(self) -> int:
        return len(self._held)
