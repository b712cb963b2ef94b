"""DELAY messages waiting in the revive log: which are due, and how far progress may go.

A DELAY message sent for a future delivery time is appended to a revive queue
as a ``delay`` record (:mod:`popbroker.services.revivelog`). The revive role
tails that queue anyway, with a clock, so it also delivers these: when the
delivery time passes it reads the record back and appends the message to its
topic and queue.

:class:`DelayLedger` is the revive queue's memory of pending delay records. It
holds positions and times only (never bodies, which may be 4 MiB each) and
tells the revive loop the oldest pending position, below which revive
progress must not be persisted — a restart re-scans from there and finds the
record again (a crash after the delivery but before progress is persisted
delivers it twice: at-least-once).
"""

from __future__ import annotations

import heapq


class DelayLedger:
    """Pending delay records of one revive queue."""

    def __init__(self) -> None:
        self._pending: dict[int, int] = {}  # revive queue offset -> deliver time
        self._by_time: list[tuple[int, int]] = []
        self._by_offset: list[int] = []

    def observe(self, revive_queue_offset: int, deliver_ms: int) -> None:
        """A delay record at ``revive_queue_offset`` due at ``deliver_ms``."""
        if revive_queue_offset in self._pending:
            return
        self._pending[revive_queue_offset] = deliver_ms
        heapq.heappush(self._by_time, (deliver_ms, revive_queue_offset))
        heapq.heappush(self._by_offset, revive_queue_offset)

    def due(self, now_ms: int, *, limit: int) -> list[int]:
        """Positions of records due at ``now_ms``, earliest first (they stay pending)."""
        due: list[int] = []
        kept: list[tuple[int, int]] = []
        while self._by_time and len(due) < limit:
            deliver_ms, offset = self._by_time[0]
            if deliver_ms > now_ms:
                break
            heapq.heappop(self._by_time)
            if self._pending.get(offset) == deliver_ms:
                due.append(offset)
                kept.append((deliver_ms, offset))
        for item in kept:  # re-queued until completed, so a failed delivery is retried
            heapq.heappush(self._by_time, item)
        return due

    def complete(self, revive_queue_offset: int) -> None:
        """The record at ``revive_queue_offset`` was delivered (or is unreadable)."""
        self._pending.pop(revive_queue_offset, None)
        while self._by_time and self._by_time[0][1] not in self._pending:
            heapq.heappop(self._by_time)

    def oldest_pending_offset(self) -> int | None:
        """The lowest pending position, or None."""
        while self._by_offset and self._by_offset[0] not in self._pending:
            heapq.heappop(self._by_offset)
        return self._by_offset[0] if self._by_offset else None

    def __len__(self) -> int:
        return len(self._pending)
