"""The live POP state the admin API reports, and what the store alone can tell of it.

The admin server runs in the ``store`` role; the POP engine's memory (the
checkpoint buffer, the revive ledgers) lives in the ``popack`` and ``revive``
roles. :class:`PopStateProvider` is the narrow interface through which those
roles will report it -- the services layer implements it (structurally: it
need not import this module) and hands it to ``serve_admin(pop_state=...)``.

Until it does, :class:`StorePopState` computes what the durable revive log
tells, per call, with a short cache:

  1. For each revive queue, read the records from the revive progress (the
     committed offset of ``CID_RMQ_SYS_REVIVE_GROUP``, else the queue's min)
     to the end -- only the newest ``max_scan_records`` of them when there are
     more (in-flight checkpoints are recent; acks of older checkpoints then
     count as orphans in the statistics).
  2. Feed them to a :class:`~popbroker.pop.reviving.ReviveLedger` (the same
     matching the revive role does: tuple keys, orphan and duplicate acks
     counted, never stalling) for the ledger statistics, and match acks to
     checkpoints by :func:`~popbroker.pop.records.ack_key` for the counts.
  3. In flight = un-acked messages of checkpoints whose revive time is still in
     the future, per (topic, group, queue). A lower bound: checkpoints still in
     popack's memory (at most ``popCkStayBufferTime`` old) are not in the log.

Callers: :mod:`popbroker.inspect.inspecting`, :mod:`popbroker.admin.scanning`, the
admin server (``serve_admin``), the popack metrics and the ``all`` role.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from popbroker.pop import checkpoints, records, revivelog
from popbroker.pop import errors as pop_errors
from popbroker.pop.checkpointbuffer import BufferStats
from popbroker.pop.checkpoints import Checkpoint, CheckpointKey, QueueKey
from popbroker.pop.reviving import LedgerStats, ReviveLedger
from popbroker.store import names
from popbroker.store.api import ReadStatus, StoreApi
from popbroker.store.errors import UnknownTopic

DEFAULT_MAX_SCAN_RECORDS = 20_000
DEFAULT_CACHE_MS = 1_000
_READ_BATCH = 512


class PopStateProvider(Protocol):
    """Live POP state, as the popack and revive roles know it."""

    async def in_flight(self, queues: Sequence[QueueKey]) -> Mapping[QueueKey, int]:
        """Popped, not acked, not yet revived messages per queue; absent keys are unknown."""
        ...

    async def revive_ledgers(self) -> Mapping[int, LedgerStats]:
        """Ledger statistics per revive queue id; absent ids are unknown."""
        ...

    async def checkpoint_buffer(self) -> BufferStats | None:
        """The checkpoint buffer's sizes, or None when unknown."""
        ...


@dataclass(frozen=True, slots=True)
class _Snapshot:
    taken_ms: int
    in_flight: dict[QueueKey, int]
    ledgers: dict[int, LedgerStats]


class StorePopState:
    """:class:`PopStateProvider` from the durable revive log alone (see the module docstring)."""

    def __init__(
        self,
        store: StoreApi,
        *,
        clock: Callable[[], int],
        max_scan_records: int = DEFAULT_MAX_SCAN_RECORDS,
        cache_ms: int = DEFAULT_CACHE_MS,
    ) -> None:
        self._store = store
        self._clock = clock
        self._max_scan_records = max_scan_records
        self._cache_ms = cache_ms
        self._snapshot: _Snapshot | None = None

    async def in_flight(self, queues: Sequence[QueueKey]) -> Mapping[QueueKey, int]:
        snapshot = await self._current()
        return {key: snapshot.in_flight.get(key, 0) for key in queues}

    async def revive_ledgers(self) -> Mapping[int, LedgerStats]:
        return (await self._current()).ledgers

    async def checkpoint_buffer(self) -> BufferStats | None:
        return None  # only the popack role knows its memory

    async def _current(self) -> _Snapshot:
        now_ms = self._clock()
        snapshot = self._snapshot
        if snapshot is None or not 0 <= now_ms - snapshot.taken_ms < self._cache_ms:
            snapshot = await self._scan(now_ms)
            self._snapshot = snapshot
        return snapshot

    async def _scan(self, now_ms: int) -> _Snapshot:
        info = await self._store.info()
        topic = names.revive_topic(info.cluster)
        config = {t.name: t for t in await self._store.topics()}.get(topic)
        in_flight: dict[QueueKey, int] = {}
        ledgers: dict[int, LedgerStats] = {}
        for revive_queue_id in range(config.queue_nums if config else 0):
            pending, ledger = await self._scan_queue(
                topic, revive_queue_id, local_broker_name=info.broker_name
            )
            ledgers[revive_queue_id] = ledger.stats()
            for ck in pending.values():
                if ck.revive_time_ms <= now_ms:
                    continue  # due: revived already or waiting for revive, not invisible
                unacked = len(checkpoints.unacked_offsets(ck))
                if unacked > 0:
                    key = QueueKey(ck.topic, ck.group, ck.queue_id)
                    in_flight[key] = in_flight.get(key, 0) + unacked
        return _Snapshot(taken_ms=now_ms, in_flight=in_flight, ledgers=ledgers)

    async def _scan_queue(
        self, topic: str, revive_queue_id: int, *, local_broker_name: str
    ) -> tuple[dict[CheckpointKey, Checkpoint], ReviveLedger]:
        start = await self._store.committed_offset(
            group=names.REVIVE_GROUP, topic=topic, queue_id=revive_queue_id
        )
        try:
            bounds = await self._store.bounds(topic, revive_queue_id)
        except UnknownTopic:
            bounds = None
        position = bounds.min_queue_offset if bounds else 0
        if start is not None:
            position = max(position, start)
        if bounds is not None:
            # In-flight checkpoints are the recent ones: read the newest records when the
            # unresolved part of the log is longer than the budget.
            position = max(position, bounds.max_queue_offset - self._max_scan_records)
        ledger = ReviveLedger(
            revive_queue_id=revive_queue_id,
            local_broker_name=local_broker_name,
            start_revive_queue_offset=position,
        )
        pending: dict[CheckpointKey, Checkpoint] = {}
        budget = self._max_scan_records
        while bounds is not None and budget > 0 and position < bounds.max_queue_offset:
            count = min(_READ_BATCH, budget)
            result = await self._store.read(
                topic, revive_queue_id, position, max_count=count, max_scan=count
            )
            if result.status is ReadStatus.OFFSET_TOO_SMALL and position < result.min_queue_offset:
                position = result.min_queue_offset
                continue
            if result.status is not ReadStatus.FOUND:
                break
            for message in result.messages:
                self._observe(
                    ledger,
                    pending,
                    revivelog.decode(
                        message.tag,
                        message.properties,
                        message.body,
                        revive_queue_id=revive_queue_id,
                    ),
                    position=message.queue_offset,
                    local_broker_name=local_broker_name,
                )
            budget -= len(result.messages)
            position = result.next_queue_offset
        return pending, ledger

    @staticmethod
    def _observe(
        ledger: ReviveLedger,
        pending: dict[CheckpointKey, Checkpoint],
        decoded: revivelog.Decoded,
        *,
        position: int,
        local_broker_name: str,
    ) -> None:
        if isinstance(decoded, Checkpoint):
            pending[decoded.key] = decoded
        elif isinstance(decoded, records.AckRecord):
            key = records.ack_key(decoded, local_broker_name=local_broker_name)
            ck = pending.get(key)
            if ck is not None:
                bitmap, _ = checkpoints.bitmap_for(ck, decoded.ack_queue_offsets)
                pending[key] = checkpoints.with_bitmap(ck, bitmap)
        # A full ledger or an out-of-order position stops the statistics from growing;
        # the counts above go on: this is a report, not the revive role.
        with contextlib.suppress(pop_errors.PopError):
            if isinstance(decoded, Checkpoint):
                ledger.observe_ck(decoded, position)
            elif isinstance(decoded, records.AckRecord):
                ledger.observe_ack(decoded, position)
            elif isinstance(decoded, revivelog.Malformed):
                ledger.observe_other(position)
