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

The flusher sees the store only through :class:`FlushedStore` (``LocalStore``
implements it): the store lock, and what runs under it -- take the dirty
descriptors, dispatch, persist, refuse writes -- and retention. The lock
discipline stays the store's. Each flush's latency goes to
``flush_latencies_ms`` (a bounded list tests and benchmarks count) and to every
callback registered with :meth:`Flusher.on_flush` (the store role's
``popfleet_store_flush_seconds`` histogram, :mod:`popbroker.metrics.store`).
"""

from __future__ import annotations

import asyncio
import errno
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol

from popbroker.store.api import FlushMode
from popbroker.store.errors import StoreClosed, StoreError, StoreFull
from popbroker.store.segments import SegmentedFile
from popbroker.store.settings import StoreSettings

log = logging.getLogger(__name__)

MAX_KEPT_LATENCIES = 4096


class FlushedStore(Protocol):
    """What the flusher needs of its store; the ``*_locked`` methods run under ``lock``."""

    @property
    def settings(self) -> StoreSettings: ...

    @property
    def lock(self) -> AbstractContextManager[object]: ...

    def log_end_locked(self) -> int:
        """The commit log's write position."""
        ...

    def take_dirty_locked(self) -> list[int]:
        """The commit log's descriptors with unsynced writes (the flusher syncs and closes them)."""
        ...

    def dispatch_upto_locked(self, position: int) -> None:
        """Index pending records ending at or below ``position`` (``StoreFull``: taken back)."""
        ...

    def persist_locked(self) -> None:
        """Offsets, queue maxima and the checkpoint."""
        ...

    def fail_writes_locked(self, message: str) -> None:
        """Refuse every further write (a failed fsync) and drop what is not indexed yet."""
        ...

    def run_retention(self) -> list[int]:
        """Delete expired commit-log segments (takes the lock itself)."""
        ...


class Flusher:
    """Owns durability timing for one ``LocalStore``."""

    def __init__(self, store: FlushedStore, *, flushed_position: int) -> None:
        self.store = store
        self.flushed_position = flushed_position
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
        self._flush_observers: list[Callable[[float], None]] = []

    @property
    def takebacks(self) -> int:
        """How many take-backs happened; an appender notes it under the store lock."""
        return len(self._takeback_starts)

    def on_flush(self, observer: Callable[[float], None]) -> None:
        """Call ``observer(latency_ms)`` after every successful flush, on the flusher thread."""
        self._flush_observers.append(observer)

    def start(self) -> None:
        """Start (or, after ``stop``, start again) the flusher thread; the log is taken
        as flushed to its end, as recovery and a truncation leave it."""
        with self.store.lock:
            self.flushed_position = self.store.log_end_locked()
        self._stopping = False
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
                self.store.run_retention()

    def _flush_once(self) -> None:
        store = self.store
        with store.lock:
            target = store.log_end_locked()
            fds = store.take_dirty_locked()
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
            full = exc.errno == errno.ENOSPC
            error: StoreError = StoreFull(message) if full else StoreError(message)
            with store.lock:
                store.fail_writes_locked(message)
            self._fail_all_waiters(error)
            return
        latency_ms = (time.perf_counter() - started) * 1000
        self.flush_latencies_ms.append(latency_ms)
        if len(self.flush_latencies_ms) > MAX_KEPT_LATENCIES:
            del self.flush_latencies_ms[: MAX_KEPT_LATENCIES // 2]
        for observer in self._flush_observers:
            observer(latency_ms)
        with store.lock:
            if store.settings.flush_mode is FlushMode.SYNC:
                try:
                    store.dispatch_upto_locked(target)
                except StoreFull as exc:
                    self._take_back_waiters(store.log_end_locked(), exc)
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
            with self.store.lock:
                self.store.persist_locked()
        except OSError as exc:
            log.error("persisting offsets and checkpoint failed: %s", exc)


def _succeed(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _fail(future: asyncio.Future[None], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
