"""The checkpoint flush and offset-commit loop of the popack role.

Every ``flush_interval_ms`` (and once more when draining):

  1. Take the checkpoints due for flush from the buffer (they carry the bitmap
     known at that moment) and append them to the revive log in one store
     call. On success mark each durable and append the acks merged while it
     was being written, *after* it; on failure return them to the buffer, due
     at once, so the next round retries.
  2. Advance the committed offsets: the buffer pops, per queue and strictly in
     pop order, every batch whose checkpoint is durable or fully acked, and
     this loop writes the new committed offsets to the store. A failed commit
     is kept and retried next round (the buffer has already forgotten the
     entries; the newest offset per queue wins).

Step 1 before step 2 in every round is the at-least-once invariant: an offset
never passes a batch whose checkpoint is not durable.

Draining (graceful stop): the buffer stops buffering and everything becomes
due; :meth:`CheckpointFlusher.drain` runs rounds until nothing is left or its
deadline passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from popbroker.pop.checkpoints import QueueKey
from popbroker.services import revivelog
from popbroker.services.popstate import PopState
from popbroker.services.settings import PopackSettings
from popbroker.store.api import StoreApi
from popbroker.store.errors import StoreError

log = logging.getLogger(__name__)

MAX_CKS_PER_ROUND = 1024


@dataclass(frozen=True, slots=True)
class FlushReport:
    """What one round did."""

    written: int
    failed: int
    committed: int


class CheckpointFlusher:
    """Flushes due checkpoints and commits offsets (see the module docstring)."""

    def __init__(self, *, store: StoreApi, state: PopState, settings: PopackSettings) -> None:
        self._store = store
        self._state = state
        self._settings = settings
        self._pending_commits: dict[QueueKey, int] = {}

    async def flush_once(self) -> FlushReport:
        """One round: steps 1 and 2."""
        written, failed = await self._flush_due()
        committed = await self._commit()
        return FlushReport(written=written, failed=failed, committed=committed)

    async def _flush_due(self) -> tuple[int, int]:
        state = self._state
        buffer = state.buffer
        due = buffer.due_for_flush(state.clock(), limit=MAX_CKS_PER_ROUND)
        if not due:
            return 0, 0
        cluster = self._settings.cluster
        try:
            await self._store.append([revivelog.ck_message(cluster, ck) for ck in due])
        except StoreError as exc:
            log.warning("flushing %d checkpoints failed: %s", len(due), exc)
            now_ms = state.clock()
            for ck in due:
                buffer.flush_failed(ck.key, now_ms)
            return 0, len(due)
        late = [
            revivelog.record_message(cluster, ack, revive_queue_id=ck.revive_queue_id)
            for ck in due
            if (ack := buffer.mark_durable(ck.key)) is not None
        ]
        if late:
            try:
                await self._store.append(late)
            except StoreError as exc:  # lost acks only cause redeliveries
                log.warning("writing %d late acks failed: %s", len(late), exc)
        return len(due), 0

    async def _commit(self) -> int:
        self._pending_commits.update(self._state.buffer.advance_commits())
        committed = 0
        for queue_key, queue_offset in list(self._pending_commits.items()):
            try:
                await self._store.commit_offset(
                    group=queue_key.group,
                    topic=queue_key.topic,
                    queue_id=queue_key.queue_id,
                    queue_offset=queue_offset,
                )
            except StoreError as exc:
                log.warning("committing %s at %d failed: %s", queue_key, queue_offset, exc)
                continue
            if self._pending_commits.get(queue_key) == queue_offset:
                del self._pending_commits[queue_key]
            committed += 1
        return committed

    async def run(self, stop: asyncio.Event) -> None:
        """Rounds every ``flush_interval_ms`` until ``stop`` is set."""
        interval_s = self._settings.flush_interval_ms / 1000
        while not stop.is_set():
            try:
                await self.flush_once()
            except StoreError as exc:  # keep the loop alive; the next round retries
                log.warning("flush round failed: %s", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)

    async def drain(self, *, timeout_s: float) -> bool:
        """Flush everything and commit (graceful stop); True when nothing is left."""
        self._state.buffer.begin_drain()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            report = await self.flush_once()
            stats = self._state.buffer.stats()
            if stats.in_memory == 0 and stats.writing == 0 and not self._pending_commits:
                return True
            if report.failed:
                await asyncio.sleep(0.05)  # the store refused: back off before retrying
        return False
