"""The flusher thread: group commit, SYNC-mode dispatch, periodic persistence, retention.

One loop, woken by appends (``poke``) or by its interval:

1. take the commit log's dirty descriptors under the store lock, note the write
   position ``p``;
2. fdatasync them *outside* the lock (appends continue meanwhile and will share
   the next fsync: group commit);
3. under the lock: in SYNC mode dispatch records ending at or below ``p``; record
   ``p`` as flushed; wake every appender waiting for a position <= ``p``;
4. every ``offsets_persist_interval_ms``: persist offsets, fsync consume queues,
   write the checkpoint; every ``retention_check_interval_ms``: run retention.

In ASYNC mode step 1-3 run every ``flush_interval_ms``; in SYNC mode as soon as
an append arrives. A failed fsync fails the waiting appenders (the data may not be
durable) and marks the store unwritable until a later flush succeeds. A disk too
full to index (step 3) takes the unacknowledged tail back out of the log; waiters
below the cut succeed, the others get ``StoreFull`` (``_take_back_waiters``).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import threading
import time
from typing import TYPE_CHECKING

from popbroker.store import retention
from popbroker.store.api import FlushMode
from popbroker.store.errors import StoreClosed, StoreError, StoreFull
from popbroker.store.segments import SegmentedFile

if TYPE_CHECKING:
    from popbroker.store.local import LocalStore

log = logging.getLogger(__name__)


class Flusher:
    """Owns durability timing for one ``LocalStore``."""

    def __init__(self, store: LocalStore) -> None:
        self.store = store
        self.flushed_position = store.commitlog.end
        self._wake = threading.Condition(threading.Lock())
        self._poked = False
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._waiters: list[tuple[int, int, asyncio.Future[None], asyncio.AbstractEventLoop]] = []
        self._sequence = itertools.count()
        self._waiters_lock = threading.Lock()
        # where each take-back (disk full while indexing) cut the log, in order
        self._takeback_starts: list[int] = []
        self._takeback_error = ""
        self.flush_latencies_ms: list[float] = []

    @property
    def takebacks(self) -> int:
        """How many take-backs happened; an appender notes it under the store lock."""
        return len(self._takeback_starts)

    def start(self) -> None:
        self.flushed_position = self.store.commitlog.end
        self._thread = threading.Thread(target=self._run, name="store-flusher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._waiters_lock:
            waiters, self._waiters = self._waiters, []
        for _end, _seq, future, loop in waiters:
            loop.call_soon_threadsafe(_fail, future, StoreClosed("store closed before flush"))

    def poke(self) -> None:
        if self.store.settings.flush_mode is FlushMode.SYNC:
            with self._wake:
                self._poked = True
                self._wake.notify()

    def mark_flushed(self, position: int) -> None:
        self.flushed_position = max(self.flushed_position, position)

    async def wait_flushed(self, position: int, *, takebacks: int | None = None) -> None:
        """Return once every byte below ``position`` is fsynced.

        ``takebacks`` is ``self.takebacks`` as seen when the batch ending at
        ``position`` was placed; ``StoreFull`` if a take-back since then removed it.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._waiters_lock:
            if takebacks is not None and any(
                start < position for start in self._takeback_starts[takebacks:]
            ):
                raise StoreFull(self._takeback_error)
            if position <= self.flushed_position:
                return
            heapq.heappush(self._waiters, (position, next(self._sequence), future, loop))
        if self._thread is None:
            raise StoreClosed("flusher is not running")
        self.poke()
        await future

    # ------------------------------------------------------------------ the loop

    def _run(self) -> None:
        settings = self.store.settings
        interval_s = settings.flush_interval_ms / 1000
        next_persist = time.monotonic()
        next_retention = time.monotonic() + settings.retention_check_interval_ms / 1000
        while True:
            with self._wake:
                if not self._poked and not self._stopping:
                    self._wake.wait(interval_s)
                self._poked = False
                stopping = self._stopping
            if stopping:
                return
            self._flush_once()
            now = time.monotonic()
            if now >= next_persist:
                next_persist = now + settings.offsets_persist_interval_ms / 1000
                self._persist()
            if now >= next_retention:
                next_retention = now + settings.retention_check_interval_ms / 1000
                self.run_retention()

    def _flush_once(self) -> None:
        store = self.store
        with store._lock:
            target = store.commitlog.end
            fds = store.commitlog.file.take_dirty()
        if target <= self.flushed_position and not fds:
            return
        started = time.perf_counter()
        try:
            SegmentedFile.sync_and_close(fds)
        except OSError as exc:
            # Fail-stop, as databases do: after a failed fsync the kernel may have dropped
            # the dirty pages, and a retried fsync can report success for data that is gone.
            # Refuse every further write; a restart re-verifies the log from the checkpoint.
            message = (
                f"commit log fsync failed ({exc}); the store accepts no more writes - "
                "restart it so recovery can verify the log"
            )
            log.error("%s", message)
            error: StoreError = StoreFull(message) if exc.errno == 28 else StoreError(message)
            with store._lock:
                store._last_error = message
                store._fsync_failure = message
                store._pending.clear()  # never index what may not be durable
            self._fail_all_waiters(error)
            return
        self.flush_latencies_ms.append((time.perf_counter() - started) * 1000)
        if len(self.flush_latencies_ms) > 4096:
            del self.flush_latencies_ms[:2048]
        with store._lock:
            if store.settings.flush_mode is FlushMode.SYNC:
                try:
                    store._dispatch_upto_locked(target)
                except StoreFull as exc:
                    self._take_back_waiters(store.commitlog.end, exc)
                    return
            self.mark_flushed(target)
        self._release_waiters(target, None)

    def _fail_all_waiters(self, error: StoreError) -> None:
        with self._waiters_lock:
            failed, self._waiters = self._waiters, []
        for _end, _seq, future, loop in failed:
            loop.call_soon_threadsafe(_fail, future, error)

    def _take_back_waiters(self, kept: int, error: StoreFull) -> None:
        """Under the store lock, after a take-back cut the log at ``kept``: appenders
        below it succeed, every other one (its batch is gone) gets ``error``."""
        self.mark_flushed(kept)
        self._release_waiters(kept, None)
        with self._waiters_lock:
            self._takeback_starts.append(kept)
            self._takeback_error = str(error)
            failed, self._waiters = self._waiters, []
        for _end, _seq, future, loop in failed:
            loop.call_soon_threadsafe(_fail, future, error)

    def _release_waiters(self, target: int, error: StoreError | None) -> None:
        released = []
        with self._waiters_lock:
            while self._waiters and self._waiters[0][0] <= target:
                released.append(heapq.heappop(self._waiters))
        for _end, _seq, future, loop in released:
            if error is None:
                loop.call_soon_threadsafe(_succeed, future)
            else:
                loop.call_soon_threadsafe(_fail, future, error)

    def _persist(self) -> None:
        try:
            with self.store._lock:
                self.store._persist_state_locked()
        except OSError as exc:
            log.error("persisting offsets and checkpoint failed: %s", exc)

    def run_retention(self) -> list[int]:
        store = self.store
        settings = store.settings
        with store._lock:
            file = store.commitlog.file
            bases = file.bases
            if len(bases) < 2:
                return []
            facts = []
            for base in bases[:-1]:
                stat = (file.directory / f"{base:020d}").stat()
                facts.append(retention.SegmentFacts(base, stat.st_size, stat.st_mtime_ns // 10**6))
            doomed = retention.plan(
                facts,
                active_base=bases[-1],
                now_ms=store.clock(),
                retention_ms=int(settings.retention_hours * 3_600_000),
                max_bytes=settings.retention_max_bytes,
            )
            if not doomed:
                return []
            new_min = doomed[-1] + settings.segment_bytes
            self._warn_unconsumed_locked(new_min)
            file.delete_before(new_min)
            for cq in store._cqs.values():
                cq.advance_min(new_min)
            log.info("retention deleted commit-log segments %s", doomed)
            return doomed

    def _warn_unconsumed_locked(self, new_min: int) -> None:
        store = self.store
        for row in store.offsets.rows():
            cq = store._cqs.get((row.topic, row.queue_id))
            if cq is None or row.queue_offset >= cq.max_queue_offset:
                continue
            lost = 0
            for entry in cq.entries(row.queue_offset, cq.max_queue_offset - row.queue_offset):
                if entry.physical_offset >= new_min:
                    break
                lost += 1
            if lost:
                log.warning(
                    "retention deletes %d messages of %s queue %d that group %s has not consumed "
                    "(committed offset %d)",
                    lost,
                    row.topic,
                    row.queue_id,
                    row.group,
                    row.queue_offset,
                )


def _succeed(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _fail(future: asyncio.Future[None], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
