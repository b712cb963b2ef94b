"""Long polling: park empty receives and wake them when messages may have arrived.

Purpose: an empty ``ReceiveMessage`` must not be answered at once (the client
would busy-loop); it waits up to its poll time and is woken early by an
arrival on one of its queues (fact sheet §1.10).

Rules:

  1. A receive *registers* a :class:`Waiter` for ``(topic, group)`` **before**
     its pop attempt, so an arrival between an empty attempt and the wait is
     not missed; it then waits on the waiter and re-attempts after a wake-up.
  2. At most ``max_parked`` waiters exist at once; one more raises
     :class:`~popbroker.services.errors.TooManyRequests` (``TOO_MANY_REQUESTS``
     on the wire, as the proxy's ``POLLING_FULL``).
  3. Wake-ups (:meth:`LongPolling.notify_arrival`): an arrival on queue *q*
     of topic ``t`` wakes, for every group waiting on ``t``, the oldest
     waiter not woken yet among those popping all queues and among those
     popping exactly *q* (a push consumer's assigned queue) — one message
     wakes one poller per key, not a herd, and never only a poller of another
     queue; an arrival on the retry topic ``%RETRY%g+t`` wakes one poller per
     key of group ``g`` on ``t`` (every pop reads the retry topic too);
     system topics wake nobody. A
     receive that handed out messages and saw more behind them wakes the next
     waiter of its key (:meth:`LongPolling.notify`), so a backlog is drained
     by all pollers.
  4. Waking is an ``asyncio.Event`` per waiter: cheap, idempotent, and a
     spurious wake-up only costs one empty attempt.

Callers: receiving (park/wait), the arrival pump of the popack role
(:meth:`LongPolling.pump`), acking (a FIFO queue unblocked by an ack).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from popbroker.services import errors
from popbroker.store import names
from popbroker.store.api import StoreApi

log = logging.getLogger(__name__)

_Key = tuple[str, str, int]  # (topic, group, queue id or ALL_QUEUES)
ALL_QUEUES = -1


class Waiter:
    """One parked receive; use as a context manager so it always unregisters."""

    __slots__ = ("_event", "_key", "_polling")

    def __init__(self, polling: LongPolling, key: _Key) -> None:
        self._polling = polling
        self._key = key
        self._event = asyncio.Event()

    def wake(self) -> None:
        self._event.set()

    @property
    def woken(self) -> bool:
        """True while a wake-up is pending (not yet consumed by :meth:`wait`)."""
        return self._event.is_set()

    async def wait(self, timeout_s: float) -> bool:
        """Wait for a wake-up; True when woken, False on timeout. Re-arms itself."""
        if timeout_s <= 0:
            return False
        try:
            await asyncio.wait_for(self._event.wait(), timeout_s)
        except TimeoutError:
            return False
        self._event.clear()
        return True

    def close(self) -> None:
        self._polling._unregister(self._key, self)

    def __enter__(self) -> Waiter:
        return self

    def __exit__(self, *_exc_info: object) -> None:
        self.close()


class LongPolling:
    """The registry of parked receives (see the module docstring)."""

    def __init__(self, *, max_parked: int = 10_000) -> None:
        self._max_parked = max_parked
        self._waiters: dict[_Key, dict[Waiter, None]] = {}  # insertion order = park order
        self._keys_by_topic: dict[str, set[tuple[str, int]]] = {}  # topic -> {(group, queue)}
        self._parked = 0

    @property
    def parked(self) -> int:
        """How many receives are parked."""
        return self._parked

    def register(self, topic: str, group: str, queue_id: int = ALL_QUEUES) -> Waiter:
        """Register a waiter (rule 1); raises TooManyRequests when full.

        ``queue_id`` is the one queue the receive pops (a push consumer's
        assigned queue), or ``ALL_QUEUES``.
        """
        if self._parked >= self._max_parked:
            raise errors.TooManyRequests(f"{self._parked} receives are already parked")
        key = (topic, group, queue_id)
        waiter = Waiter(self, key)
        self._waiters.setdefault(key, {})[waiter] = None
        self._keys_by_topic.setdefault(topic, set()).add((group, queue_id))
        self._parked += 1
        return waiter

    def _unregister(self, key: _Key, waiter: Waiter) -> None:
        waiters = self._waiters.get(key)
        if waiters is None or waiter not in waiters:
            return
        del waiters[waiter]
        self._parked -= 1
        if not waiters:
            del self._waiters[key]
            keys = self._keys_by_topic.get(key[0])
            if keys is not None:
                keys.discard((key[1], key[2]))
                if not keys:
                    del self._keys_by_topic[key[0]]

    def notify(
        self,
        topic: str,
        group: str,
        queue_id: int | None = None,
        *,
        all_waiters: bool = False,
    ) -> int:
        """Wake, per matching key, the oldest not-yet-woken waiter (or all); returns how many.

        ``queue_id`` None matches every waiter of the group on the topic; a queue id
        matches the waiters of that queue and those of all queues.
        """
        woken = 0
        for waiter_group, waiter_queue in list(self._keys_by_topic.get(topic, ())):
            if waiter_group != group:
                continue
            if queue_id is not None and waiter_queue not in (ALL_QUEUES, queue_id):
                continue
            woken += self._wake((topic, waiter_group, waiter_queue), all_waiters=all_waiters)
        return woken

    def _wake(self, key: _Key, *, all_waiters: bool) -> int:
        woken = 0
        for waiter in self._waiters.get(key, ()):
            if waiter.woken and not all_waiters:
                continue
            waiter.wake()
            woken += 1
            if not all_waiters:
                break
        return woken

    def notify_topic(self, topic: str, queue_id: int | None = None) -> int:
        """Wake one waiter per (group, queue) waiting on ``topic`` (on ``queue_id``)."""
        groups = {group for group, _ in self._keys_by_topic.get(topic, ())}
        return sum(self.notify(topic, group, queue_id) for group in groups)

    def notify_arrival(self, topic: str, queue_id: int | None = None) -> int:
        """Rule 3: wake whoever an arrival on ``topic`` (queue ``queue_id``) concerns."""
        parsed = names.parse_retry_topic(topic)
        if parsed is not None:
            group, original = parsed
            return self.notify(original, group)  # every pop of the group reads its retry topic
        if names.is_system_topic(topic):
            return 0
        return self.notify_topic(topic, queue_id)

    async def pump(self, store: StoreApi) -> None:
        """Feed store arrivals into :meth:`notify_arrival` until cancelled."""
        stream = store.arrivals()
        try:
            async for arrival in stream:
                self.notify_arrival(arrival.topic, arrival.queue_id)
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
