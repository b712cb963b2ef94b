"""The live POP state the admin API reports, and what the store alone can tell of it.

The admin server runs in the ``store`` role; the POP engine's memory (the
checkpoint buffer, the revive ledgers) lives in the ``popack`` and ``revive``
roles. :class:`PopStateProvider` is the narrow interface through which those
roles will report it -- the services layer implements it (structurally: it
need not import this module) and hands it to ``serve_admin(pop_state=...)``.

Until it does, :class:`StorePopState` computes what the durable revive log
tells. It keeps a replay per revive queue and advances it from where it stopped
(a short cache spares even that between calls within ``cache_ms``):

  1. A replay starts at the revive progress (the committed offset of
     ``CID_RMQ_SYS_REVIVE_GROUP``, else the queue's min) -- at the newest
     ``max_scan_records`` records when the log after the progress is longer
     (in-flight checkpoints are recent; acks of older checkpoints then count as
     orphans in the statistics). Each call reads only the records appended
     since the last one.
  2. A replay is started again (step 1) when retention passed its start, when
     the log is shorter than where it stopped (a reset), or when step 1's start
     has moved more than ``max_scan_records`` past its start (the revive
     progress or the budget window moved on): so a replay covers at most twice
     the budget, and its statistics may include up to one budget of records
     before the progress (CKs revived since are due, so never in flight).
  3. Records go to a :class:`~popbroker.pop.reviving.ReviveLedger` (the same
     matching the revive role does: tuple keys, orphan and duplicate acks
     counted, never stalling) for the ledger statistics, and acks are matched to
     checkpoints by :func:`~popbroker.pop.records.ack_key` for the counts; a
     fully acked checkpoint is dropped.
  4. In flight = un-acked messages of checkpoints whose revive time is still in
     the future, per (topic, group, queue). A lower bound: checkpoints still in
     popack's memory (at most ``popCkStayBufferTime`` old) are not in the log.

A replay advanced in steps says exactly what one replay of the same records says
(a test compares them); ``records_read`` counts the records read, for tests and
the benchmark.

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


class _Replay:
    """One revive queue's records from ``start`` up to ``end``, replayed (steps 1-3)."""

    def __init__(self, *, revive_queue_id: int, start: int, local_broker_name: str) -> None:
        self.start = start
        self.end = start
        self.local_broker_name = local_broker_name
        self.ledger = ReviveLedger(
            revive_queue_id=revive_queue_id,
            local_broker_name=local_broker_name,
            start_revive_queue_offset=start,
        )
        self.pending: dict[CheckpointKey, Checkpoint] = {}

    def observe(self, decoded: revivelog.Decoded, *, position: int) -> None:
        if isinstance(decoded, Checkpoint):
            if not checkpoints.all_acked(decoded):
                self.pending[decoded.key] = decoded
        elif isinstance(decoded, records.AckRecord):
            key = records.ack_key(decoded, local_broker_name=self.local_broker_name)
            ck = self.pending.get(key)
            if ck is not None:
                bitmap, _ = checkpoints.bitmap_for(ck, decoded.ack_queue_offsets)
                acked = checkpoints.with_bitmap(ck, bitmap)
                if checkpoints.all_acked(acked):
                    del self.pending[key]
                else:
                    self.pending[key] = acked
        # A full ledger or an out-of-order position stops the statistics from growing;
        # the counts above go on: this is a report, not the revive role.
        with contextlib.suppress(pop_errors.PopError):
            if isinstance(decoded, Checkpoint):
                self.ledger.observe_ck(decoded, position)
            elif isinstance(decoded, records.AckRecord):
                self.ledger.observe_ack(decoded, position)
            elif isinstance(decoded, revivelog.Malformed):
                self.ledger.observe_other(position)
        self.end = position + 1


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
        self._replays: dict[int, _Replay] = {}
        self.records_read = 0

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
            snapshot = await self._advance(now_ms)
            self._snapshot = snapshot
        return snapshot

    async def _advance(self, now_ms: int) -> _Snapshot:
        info = await self._store.info()
        topic = names.revive_topic(info.cluster)
        config = {t.name: t for t in await self._store.topics()}.get(topic)
        in_flight: dict[QueueKey, int] = {}
        ledgers: dict[int, LedgerStats] = {}
        queue_ids = range(config.queue_nums if config else 0)
        self._replays = {q: r for q, r in self._replays.items() if q in queue_ids}
        for revive_queue_id in queue_ids:
            replay = await self._replay(topic, revive_queue_id, local_broker_name=info.broker_name)
            if replay is None:
                continue
            ledgers[revive_queue_id] = replay.ledger.stats()
            for ck in replay.pending.values():
                if ck.revive_time_ms <= now_ms:
                    continue  # due: revived already or waiting for revive, not invisible
                key = QueueKey(ck.topic, ck.group, ck.queue_id)
                in_flight[key] = in_flight.get(key, 0) + len(checkpoints.unacked_offsets(ck))
        return _Snapshot(taken_ms=now_ms, in_flight=in_flight, ledgers=ledgers)

    async def _replay(
        self, topic: str, revive_queue_id: int, *, local_broker_name: str
    ) -> _Replay | None:
        """The queue's replay, started again or advanced to the end (steps 1-2)."""
        try:
            bounds = await self._store.bounds(topic, revive_queue_id)
        except UnknownTopic:
            self._replays.pop(revive_queue_id, None)
            return None
        progress = await self._store.committed_offset(
            group=names.REVIVE_GROUP, topic=topic, queue_id=revive_queue_id
        )
        wanted = bounds.min_queue_offset if progress is None else progress
        wanted = max(
            wanted, bounds.min_queue_offset, bounds.max_queue_offset - self._max_scan_records
        )
        replay = self._replays.get(revive_queue_id)
        if (
            replay is None
            or replay.start < bounds.min_queue_offset
            or replay.end > bounds.max_queue_offset
            or wanted - replay.start > self._max_scan_records
        ):
            replay = _Replay(
                revive_queue_id=revive_queue_id, start=wanted, local_broker_name=local_broker_name
            )
            self._replays[revive_queue_id] = replay
        await self._read_to_end(topic, revive_queue_id, replay, end=bounds.max_queue_offset)
        return replay

    async def _read_to_end(
        self, topic: str, revive_queue_id: int, replay: _Replay, *, end: int
    ) -> None:
        position = replay.end
        while position < end:
            count = min(_READ_BATCH, end - position)
            result = await self._store.read(
                topic, revive_queue_id, position, max_count=count, max_scan=count
            )
            if result.status is ReadStatus.OFFSET_TOO_SMALL and position < result.min_queue_offset:
                position = result.min_queue_offset
                continue
            if result.status is not ReadStatus.FOUND:
                break
            for message in result.messages:
                replay.observe(
                    revivelog.decode(
                        message.tag,
                        message.properties,
                        message.body,
                        revive_queue_id=revive_queue_id,
                    ),
                    position=message.queue_offset,
                )
            self.records_read += len(result.messages)
            position = result.next_queue_offset
