"""``LocalStore``: the in-process implementation of ``StoreApi``.

Directory layout under ``data_dir``::

    LOCK                      flock'ed while a store has the directory open
    checkpoint                flushed + dispatched physical offsets (see ``flushmark``)
    commitlog/<20 digits>     commit-log segments
    consumequeue/<topic>/<q>/ consume-queue files
    config/metadata.json      topics, groups, modes, members, config epoch (+ .bak)
    config/offsets.json       committed consumer offsets (+ .bak)
    config/queues.json        last known max queue offset per queue (+ .bak)

Threads: callers run on one asyncio loop; a ``Flusher`` thread fsyncs the commit
log, dispatches in ``SYNC`` mode, persists offsets and checkpoints, and runs
retention. One lock (``self._lock``) guards every file and table; fsync of the
commit log happens outside it, so concurrent appends share one fsync (group
commit).

Config writes (``put_topic``, ``put_group``, ``put_consume_mode``, ``set_members``,
the deletes) are group-committed the same way, so a burst of admin calls costs a
few rewrites of ``config/metadata.json``, not one per call:

1. under ``self._lock``, change ``self.metadata`` and take the next config
   generation (``_config_changed_locked``);
2. wait, off the event loop, until the file holds that generation
   (``_config_durable``): one waiter at a time writes, in a worker thread, a
   snapshot of everything changed so far; the waiters queued behind it find their
   generation already written and return without writing;
3. only then answer. An answered write is on disk (fsynced, as before); a crash
   before the answer may lose it, and the caller, unanswered, retries.

Readers may see a change between steps 1 and 3. Snapshots are taken under
``self._lock`` and written under ``self._config_file_lock`` (taken after
``self._lock``, never before it), and a snapshot older than the file is never
written, so the file only moves forward. The config epoch is untouched by all
this: it changes only when recovery starts from an empty or restored config.

Opening takes the directory lock (a second store on the same directory is
refused), then runs recovery: the numbered steps are in
:mod:`popbroker.store.recovery`, which holds their mechanics; ``_recover`` calls
them in order. The flusher sees the store through the narrow
:class:`~popbroker.store.flushing.FlushedStore` (the ``*_locked`` methods and
``run_retention`` below).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from popbroker.store import (
    appending,
    atomicfiles,
    filters,
    flushmark,
    names,
    recovery,
    replicated,
    retention,
)
from popbroker.store import format as fmt
from popbroker.store.api import (
    MAX_READ_COUNT,
    PROPERTY_TAGS,
    AppendResult,
    Arrival,
    ClusterMember,
    CommittedOffset,
    ConsumeModeConfig,
    FlushMode,
    GroupConfig,
    MessageColumns,
    MessageToAppend,
    QueueBounds,
    ReadResult,
    ReadStatus,
    StoredMessage,
    StoreInfo,
    TopicConfig,
)
from popbroker.store.commitlog import CommitLog, Placeable, RecordFields, UnplacedAt
from popbroker.store.consumequeue import ConsumeQueue
from popbroker.store.errors import (
    CorruptStore,
    InvalidArgument,
    StoreClosed,
    StoreError,
    StoreFull,
    UnknownGroup,
    UnknownTopic,
)
from popbroker.store.flushing import Flusher
from popbroker.store.metadata import Metadata
from popbroker.store.offsets import OffsetTable
from popbroker.store.settings import StoreSettings
from popbroker.values import per_message

log = logging.getLogger(__name__)

QueueKey = tuple[str, int]
ARRIVAL_BUFFER = 100_000


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@per_message
class _Dispatch:
    """A placed record waiting to be indexed (in SYNC mode: until it is flushed)."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    tag_hash: int
    batch_start: int  # physical offset of the first record of its append batch

    @property
    def end(self) -> int:
        return self.physical_offset + self.size


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread; None on the flusher thread (SYNC dispatch)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class _ArrivalListener:
    """An asyncio queue fed from whichever thread dispatches."""

    def __init__(self, loop: asyncio.AbstractEventLoop, topic: str | None) -> None:
        self.loop = loop
        self.topic = topic  # None: every topic
        self.queue: asyncio.Queue[Arrival] = asyncio.Queue(ARRIVAL_BUFFER)
        self.dropped = 0

    def offer_many(self, arrivals: list[Arrival]) -> None:
        for arrival in arrivals:
            try:
                self.queue.put_nowait(arrival)
            except asyncio.QueueFull:
                self.dropped += 1


class ArrivalStream:
    """An async iterator of arrivals, registered from its creation; ``aclose`` ends it."""

    def __init__(self, store: LocalStore, listener: _ArrivalListener) -> None:
        self._store = store
        self._listener = listener

    def __aiter__(self) -> ArrivalStream:
        return self

    async def __anext__(self) -> Arrival:
        return await self._listener.queue.get()

    async def aclose(self) -> None:
        self._store._unsubscribe(self._listener)

    @property
    def dropped(self) -> int:
        return self._listener.dropped


_Item = TypeVar("_Item", MessageToAppend, bytes)


@per_message
class _Prepared:
    """A checked message or unplaced record of an append, before it gets its queue offset:
    either the encoded parts of a message (topic, born host, properties, the message) or
    the unplaced record's bytes."""

    topic: str
    queue_id: int
    tag: str
    source: tuple[bytes, bytes, bytes, MessageToAppend] | bytes

    def at(self, queue_offset: int, now_ms: int) -> Placeable:
        if isinstance(self.source, bytes):
            return UnplacedAt(self.source, queue_offset, now_ms)
        topic, host, props, message = self.source
        return RecordFields(
            topic=topic,
            queue_id=message.queue_id,
            queue_offset=queue_offset,
            flags=message.flags,
            born_timestamp_ms=message.born_timestamp_ms or now_ms,
            store_timestamp_ms=now_ms,
            reconsume_times=message.reconsume_times,
            born_host=host,
            properties=props,
            body=message.body,
        )


EPOCHS_FILE = "epochs.json"


def _load_epochs(path: Path) -> tuple[list[tuple[int, int]], int]:
    """The epoch history and the highest term seen (none yet: empty, 0)."""
    raw, _source = atomicfiles.read_json(path)
    if raw is None:
        return [], 0
    try:
        epochs = [(int(epoch), int(start)) for epoch, start in raw["epochs"]]
        term = int(raw.get("term", 0))
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise CorruptStore(f"{path} does not hold an epoch history: {exc}") from exc
    return epochs, max(term, max((e for e, _ in epochs), default=0))


def _first_entry_at_or_after(cq: ConsumeQueue, physical_offset: int) -> int:
    """The first queue offset of ``cq`` whose record is at or after ``physical_offset``
    (entries are in log order), or its end."""
    low, high = cq.min_queue_offset, cq.max_queue_offset
    while low < high:
        middle = (low + high) // 2
        (entry,) = cq.entries(middle, 1)
        if entry.physical_offset >= physical_offset:
            high = middle
        else:
            low = middle + 1
    return low


class LocalStore:
    """The store, in this process. Build with ``LocalStore.open``."""

    def __init__(
        self,
        data_dir: Path,
        settings: StoreSettings,
        *,
        clock: Callable[[], int],
        lock_fd: int,
    ) -> None:
        self.data_dir = data_dir
        self.settings = settings
        self.clock = clock
        self._lock_fd = lock_fd
        self._lock = threading.RLock()
        self._closed = False
        self._last_error = ""
        self._fsync_failure = ""  # set once by the flusher; the store then refuses writes
        self._config_dir = data_dir / "config"
        self._config_dir.mkdir(parents=True, exist_ok=True)
        self.metadata = Metadata()
        self._config_generation = 0  # bumped under self._lock by every config change
        self._config_written = 0  # the generation config/metadata.json holds
        self._config_file_lock = threading.Lock()  # one writer; taken after self._lock
        self._config_persisting = asyncio.Lock()  # one waiter of this loop writes at a time
        self._config_write_observers: list[Callable[[float], None]] = []
        self.offsets = OffsetTable()
        self.commitlog = CommitLog(data_dir / "commitlog", settings.segment_bytes)
        self._cqs: dict[QueueKey, ConsumeQueue] = {}
        self._next_queue_offset: dict[QueueKey, int] = {}
        self._pending: list[_Dispatch] = []
        self._dispatched_position = 0
        self._epochs: list[tuple[int, int]] = []  # (epoch, start offset): issue 18
        self._term = 0  # the highest leadership term this replica has seen: issue 18
        self._listeners: set[_ArrivalListener] = set()
        self.flusher = Flusher(self, flushed_position=self.commitlog.end)

    @property
    def lock(self) -> threading.RLock:
        """The one lock over every file and table (the flusher takes it too)."""
        return self._lock

    # ------------------------------------------------------------------ opening

    @classmethod
    def open(
        cls,
        data_dir: Path,
        settings: StoreSettings,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        repair: bool = False,
        start_flusher: bool = True,
    ) -> LocalStore:
        """Open (creating if needed) and recover the store in ``data_dir``."""
        data_dir.mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(data_dir / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(lock_fd)
            raise StoreError(f"{data_dir} is in use by another store process") from exc
        store = cls(data_dir, settings, clock=clock, lock_fd=lock_fd)
        try:
            store._recover(repair=repair)
        except BaseException:
            store._release()
            raise
        if start_flusher:
            store.flusher.start()
        return store

    def _recover(self, *, repair: bool) -> None:
        """The steps of :mod:`popbroker.store.recovery`, in order."""
        self.metadata = recovery.load_metadata(self.data_dir, settings=self.settings)  # 2
        self._persist_unless_full_locked(self._persist_metadata_locked)
        mark = flushmark.read(self.data_dir / "checkpoint")
        start = min(mark.flushed_physical_offset, mark.dispatched_physical_offset)
        report = self.commitlog.recover(checkpoint=mark.flushed_physical_offset, repair=repair)
        # recovery fsynced the log up to its (possibly cut) end; never claim more
        self.flusher.flushed_position = self.commitlog.end
        log.info(
            "commit log verified from %d to %d (%d records, %d bytes truncated)",
            report.verified_from,
            report.end,
            report.records_verified,
            report.truncated_bytes,
        )
        recovery.load_consume_queues(self.data_dir, end=self.commitlog.end, open_cq=self._open_cq)
        damaged = recovery.redispatch(
            self.commitlog, start, open_cq=self._open_cq, segment_bytes=self.settings.segment_bytes
        )
        damaged |= recovery.queues_behind_record(self._config_dir, self._cqs)
        if damaged:
            recovery.rebuild_queues(self.commitlog, damaged, cqs=self._cqs, open_cq=self._open_cq)
        for key, cq in self._cqs.items():
            cq.advance_min(self.commitlog.min_offset)
            self._next_queue_offset[key] = cq.max_queue_offset
        self._dispatched_position = self.commitlog.end
        epochs, self._term = _load_epochs(self._config_dir / EPOCHS_FILE)
        kept = [e for e in epochs if e[1] <= self.commitlog.end]
        self._epochs = epochs
        if kept != epochs:  # unflushed bytes lost with a crash took an epoch's start along
            log.warning(
                "epochs %s start past the recovered log's end; dropped", epochs[len(kept) :]
            )
            self._persist_unless_full_locked(lambda: self._write_epochs_locked(kept))
        offsets = recovery.load_offsets(self._config_dir)
        if offsets is not None:
            self.offsets = offsets
        self._persist_unless_full_locked(self._write_checkpoint_locked)

    def _open_cq(self, topic: str, queue_id: int) -> ConsumeQueue:
        key = (topic, queue_id)
        cq = self._cqs.get(key)
        if cq is None:
            directory = self.data_dir / "consumequeue" / topic / str(queue_id)
            cq = ConsumeQueue(
                directory,
                topic=topic,
                queue_id=queue_id,
                entries_per_file=self.settings.cq_entries_per_file,
            )
            self._cqs[key] = cq
        return cq

    # ------------------------------------------------------------------ closing

    async def close(self) -> None:
        """Flush, persist and release the directory. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await asyncio.to_thread(self.flusher.stop)
        self._close_files()

    def close_sync(self) -> None:
        """``close`` for code without an event loop (tools, tests of recovery)."""
        if self._closed:
            return
        self._closed = True
        self.flusher.stop()
        self._close_files()

    def _close_files(self) -> None:
        """Final flush and persist, then close every file and release the directory,
        even when that fails (a full disk: the next start recovers the rest)."""
        try:
            with self._lock:
                self._flush_all_locked()
        finally:
            with self._lock:
                for cq in self._cqs.values():
                    cq.close()
                self.commitlog.close()
            self._release()

    def _release(self) -> None:
        if self._lock_fd >= 0:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = -1

    def _flush_all_locked(self) -> None:
        self.commitlog.flush()
        with contextlib.suppress(StoreFull):  # taken back; their appenders were failed
            self.dispatch_upto_locked(self.commitlog.end)
        self.flusher.mark_flushed(self.commitlog.end)
        self._persist_unless_full_locked(self.persist_locked)

    def _persist_unless_full_locked(self, write: Callable[[], None]) -> None:
        """Write state files (config, offsets, checkpoint) at open or close; on a full
        disk note it (unwritable) instead of failing: they may lag safely, recovery
        rebuilds the rest from the commit log, and a store must open to be read."""
        try:
            write()
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            self._last_error = f"disk full writing state files: {exc.strerror}"
            log.error("%s; the next start recovers them from the commit log", self._last_error)

    # ------------------------------------------------------------------ persistence

    def _persist_metadata_locked(self) -> None:
        """Write the config now, holding the lock (opening, system topics made by appends)."""
        self._config_changed_locked()
        self._write_config()

    def _config_changed_locked(self) -> int:
        """Step 1 of a config write (module docstring): the generation to wait for."""
        self._config_generation += 1
        return self._config_generation

    def _write_config(self) -> None:
        """Write a snapshot of the config unless the file already holds a newer one."""
        with self._lock:
            generation = self._config_generation
            snapshot = self.metadata.to_json()
        with self._config_file_lock:
            if generation <= self._config_written:
                return
            started = time.monotonic()
            atomicfiles.write_json(self._config_dir / "metadata.json", snapshot)
            self._config_written = generation
        latency_ms = (time.monotonic() - started) * 1000
        for observer in self._config_write_observers:
            observer(latency_ms)

    def on_config_write(self, observer: Callable[[float], None]) -> None:
        """Call ``observer(latency_ms)`` after every rewrite of ``config/metadata.json``
        (on the writing thread); how many rewrites a burst of config changes cost."""
        self._config_write_observers.append(observer)

    async def _config_durable(self, generation: int) -> None:
        """Step 2 of a config write: return once the file holds ``generation``."""
        async with self._config_persisting:
            if self._config_written < generation:
                await asyncio.to_thread(self._write_config)

    def log_end_locked(self) -> int:
        return self.commitlog.end

    def take_dirty_locked(self) -> list[int]:
        return self.commitlog.file.take_dirty()

    def fail_writes_locked(self, message: str) -> None:
        """After a failed fsync: refuse every further write; never index what may not be
        durable."""
        self._last_error = message
        self._fsync_failure = message
        self._pending.clear()

    def persist_locked(self) -> None:
        """Offsets, queue maxima and the checkpoint (consume queues fsynced first)."""
        if self.offsets.dirty:
            atomicfiles.write_json(self._config_dir / "offsets.json", self.offsets.to_json())
            self.offsets.dirty = False
        self._write_checkpoint_locked()

    def _write_checkpoint_locked(self) -> None:
        for cq in self._cqs.values():
            cq.flush()
        queues = [[t, q, cq.max_queue_offset] for (t, q), cq in sorted(self._cqs.items())]
        atomicfiles.write_json(self._config_dir / "queues.json", {"version": 1, "queues": queues})
        flushmark.write(
            self.data_dir / "checkpoint",
            flushmark.FlushMark(
                flushed_physical_offset=self.flusher.flushed_position,
                dispatched_physical_offset=self._dispatched_position,
            ),
        )

    # ------------------------------------------------------------------ appending

    async def info(self) -> StoreInfo:
        with self._lock:
            return StoreInfo(
                cluster=self.settings.cluster,
                broker_name=self.settings.broker_name,
                config_epoch=self.metadata.epoch,
                flush_mode=self.settings.flush_mode,
                min_physical_offset=self.commitlog.min_offset,
                max_physical_offset=self.commitlog.end,
                flushed_physical_offset=self.flusher.flushed_position,
                writable=not self._last_error,
                last_error=self._last_error,
                segment_bytes=self.settings.segment_bytes,
                cq_entries_per_file=self.settings.cq_entries_per_file,
            )

    async def append(self, messages: Sequence[MessageToAppend]) -> list[AppendResult]:
        return await self._durable(*self._append(messages, self._prepare))

    async def append_records(self, records: Sequence[bytes]) -> list[AppendResult]:
        return await self._durable(*self._append(records, self._prepare_record))

    # ------------------------------------------------------------------ replication
    # (issue 18: the replica of ``popbroker.replicator`` calls these)

    def read_log(self, physical_offset: int, max_bytes: int) -> bytes:
        """A leader's side: up to ``max_bytes`` of the log from ``physical_offset`` (a
        record or segment boundary), ending on one; empty at the end of the log. Reads
        stop at a segment end, as the segments do."""
        with self._lock:
            if not self.commitlog.min_offset <= physical_offset <= self.commitlog.end:
                raise InvalidArgument(
                    f"physical offset {physical_offset} is outside the log "
                    f"[{self.commitlog.min_offset}, {self.commitlog.end}]"
                )
            size = min(max_bytes, self.commitlog.end - physical_offset)
            data = self.commitlog.file.read(physical_offset, size) if size > 0 else b""
        return replicated.cut(
            data, start=physical_offset, segment_bytes=self.settings.segment_bytes
        )

    async def append_replicated(self, physical_offset: int, data: bytes) -> int:
        """A follower's side: the leader's log bytes at ``physical_offset``, which must be
        this log's end, written byte for byte once every record in them checks
        (:func:`popbroker.store.replicated.parse`) and each record is the next of its
        queue; indexed and announced as an append is, and as durable as the flush mode
        promises when this returns the new end. All or nothing."""
        checked = replicated.parse(
            data, start=physical_offset, segment_bytes=self.settings.segment_bytes
        )
        with self._lock:
            if self._closed:
                raise StoreClosed("store is closed")
            if self._fsync_failure:
                raise StoreError(self._fsync_failure)
            if physical_offset != self.commitlog.end:
                raise InvalidArgument(
                    f"replicated bytes start at {physical_offset}, the log ends at "
                    f"{self.commitlog.end}"
                )
            assigned: dict[QueueKey, int] = {}
            for record in checked.records:
                key = (record.topic, record.queue_id)
                expected = assigned.get(key, self._next_queue_offset.get(key, 0))
                if record.queue_offset != expected:
                    raise InvalidArgument(
                        f"replicated record at {record.physical_offset} is offset "
                        f"{record.queue_offset} of {key}, whose next is {expected}"
                    )
                assigned[key] = expected + 1
            try:
                for _, chunk in checked.chunks:
                    self.commitlog.file.append(chunk)
            except (StoreFull, OSError):
                self.commitlog.file.truncate(physical_offset)  # all or nothing
                raise
            self._next_queue_offset.update(assigned)
            for record in checked.records:
                self._pending.append(
                    _Dispatch(
                        record.topic,
                        record.queue_id,
                        record.queue_offset,
                        record.physical_offset,
                        record.total_size,
                        filters.tag_hash(record.properties.get(PROPERTY_TAGS, "")),
                        physical_offset,
                    )
                )
            end = self.commitlog.end
            if self.settings.flush_mode is FlushMode.ASYNC:
                self.dispatch_upto_locked(end)
            takebacks = self.flusher.takebacks
        self.flusher.poke()
        await self._durable([], end, takebacks)
        return end

    def epochs(self) -> tuple[tuple[int, int], ...]:
        """The log's epoch history, ``(epoch, start offset)`` oldest first: which leadership
        term wrote which bytes (``popbroker.replication.rules``, rule 1)."""
        with self._lock:
            return tuple(self._epochs)

    def record_epoch(self, epoch: int, start_offset: int) -> None:
        """Add an epoch durably before any of its bytes: a new leader's at its log end, a
        follower's where the leader's frame says it starts (never past this log's end).
        Epochs strictly grow, start offsets never shrink."""
        with self._lock:
            if self._epochs and epoch <= self._epochs[-1][0]:
                raise InvalidArgument(f"epoch {epoch} is not after {self._epochs[-1][0]}")
            if self._epochs and start_offset < self._epochs[-1][1]:
                raise InvalidArgument(
                    f"epoch {epoch} starts at {start_offset}, before epoch "
                    f"{self._epochs[-1][0]} ({self._epochs[-1][1]})"
                )
            if start_offset > self.commitlog.end:
                raise InvalidArgument(
                    f"epoch {epoch} starts at {start_offset}, past the log's end "
                    f"{self.commitlog.end}"
                )
            self._write_epochs_locked([*self._epochs, (epoch, start_offset)])

    def term(self) -> int:
        """The highest leadership term this replica has seen (0: none)."""
        with self._lock:
            return self._term

    def record_term(self, term: int) -> None:
        """Remember ``term`` durably before acting in it: after a restart a replica still
        refuses a deposed leader (fencing survives the process). Terms never go back."""
        with self._lock:
            if term < self._term:
                raise InvalidArgument(f"term {term} is behind {self._term}")
            if term > self._term:
                self._term = term
                self._write_epochs_locked(self._epochs)

    def _write_epochs_locked(self, epochs: list[tuple[int, int]]) -> None:
        atomicfiles.write_json(
            self._config_dir / EPOCHS_FILE,
            {"version": 1, "term": self._term, "epochs": [list(e) for e in epochs]},
        )
        self._epochs = epochs

    async def truncate_log(self, physical_offset: int) -> None:
        """A follower's side of a new term: drop the log from ``physical_offset`` (where a
        record or a segment starts: the divergence point the replication rules chose) and
        every consume-queue entry at or after it, durably, before any byte of the new
        leader is written. The flusher is drained and stopped meanwhile, so no flush of
        the old bytes can finish after the cut and count them as on disk."""
        with self._lock:
            end = self.commitlog.end
            if not self.commitlog.min_offset <= physical_offset <= end:
                raise InvalidArgument(
                    f"cannot truncate at {physical_offset}: the log is "
                    f"[{self.commitlog.min_offset}, {end}]"
                )
            if physical_offset == end:
                return
            if physical_offset % self.settings.segment_bytes:
                # a record, a filler or a segment's short tail starts there; a position
                # inside a record fails the record's checks ("bad")
                kind, _, _, reason = self.commitlog._at(physical_offset)
                if kind == "bad":
                    raise InvalidArgument(f"no record starts at {physical_offset}: {reason}")
        await self.flusher.wait_flushed(end)
        await asyncio.to_thread(self.flusher.stop)
        try:
            with self._lock:
                self.dispatch_upto_locked(self.commitlog.end)
                # The checkpoint first: a crash after it and before the cut leaves the old
                # bytes, valid and cut again on the next term; the other order would leave
                # a checkpoint past the log's end, which recovery refuses as lost data.
                self.flusher.flushed_position = physical_offset
                self._dispatched_position = physical_offset
                self._write_checkpoint_locked()
                # epochs with no byte left go before the bytes do (a crash between leaves
                # their bytes to the older epoch, and the next term cuts them again)
                self._write_epochs_locked([e for e in self._epochs if e[1] < physical_offset])
                for key, cq in self._cqs.items():
                    keep = _first_entry_at_or_after(cq, physical_offset)
                    if keep < cq.max_queue_offset:
                        cq.truncate_to(keep)
                    self._next_queue_offset[key] = min(self._next_queue_offset.get(key, keep), keep)
                self.commitlog.file.truncate(physical_offset)
                self.commitlog.file.flush()
                self._write_checkpoint_locked()  # the queues' new maxima
        finally:
            self.flusher.start()

    def log_head(self) -> tuple[int, dict[QueueKey, int], tuple[tuple[int, int], ...]]:
        """Where this log begins, for a follower whose log ends before it (retention took the
        head): the first physical offset held, each consume queue's first queue offset
        there, and the epochs that begin at or before it (issue 18)."""
        with self._lock:
            start = self.commitlog.min_offset
            queues = {key: cq.min_queue_offset for key, cq in self._cqs.items()}
            return start, queues, tuple(e for e in self._epochs if e[1] <= start)

    async def begin_log_at(
        self,
        physical_offset: int,
        queues: Mapping[QueueKey, int],
        epochs: Sequence[tuple[int, int]],
    ) -> None:
        """A follower's side when its leader's log begins past this log's end (the head went
        with the leader's retention, so no replica holds it): drop this whole log and every
        consume queue, durably, and begin empty at ``physical_offset`` (a segment start, the
        leader's :meth:`log_head`), each queue at the leader's first offset there, with the
        leader's epochs up to it. What goes lies below the leader's log start. Crash-safe
        in this order: the checkpoint to 0 (valid for any log), the epochs, the files, the
        new empty first segment, then the checkpoint at ``physical_offset``; a crash between
        leaves a log the next connection begins again."""
        with self._lock:
            end = self.commitlog.end
            if physical_offset <= end or physical_offset % self.settings.segment_bytes:
                raise InvalidArgument(
                    f"cannot begin the log at {physical_offset}: it must be a segment start "
                    f"past this log's end {end}"
                )
            if any(start > physical_offset for _, start in epochs):
                raise InvalidArgument(f"epochs {list(epochs)} start past {physical_offset}")
        await self.flusher.wait_flushed(end)
        await asyncio.to_thread(self.flusher.stop)
        try:
            with self._lock:
                self.dispatch_upto_locked(self.commitlog.end)
                self.flusher.flushed_position = 0
                self._dispatched_position = 0
                self._write_checkpoint_locked()
                self._write_epochs_locked(sorted(epochs))
                for cq in self._cqs.values():
                    cq.destroy()
                self._cqs.clear()
                self._next_queue_offset.clear()
                self.commitlog.file.delete_all()
                self.commitlog.file.start_position(physical_offset)
                self.commitlog.file.append(b"")  # the first segment, empty: the log's start
                self.commitlog.file.flush()
                for (topic, queue_id), queue_offset in sorted(queues.items()):
                    self._open_cq(topic, queue_id).begin_at(queue_offset)
                    self._next_queue_offset[(topic, queue_id)] = queue_offset
                self.flusher.flushed_position = physical_offset
                self._dispatched_position = physical_offset
                self._write_checkpoint_locked()
        finally:
            self.flusher.start()

    def state_version(self) -> tuple[int, int]:
        """``(config generation, offsets version)``: the state outside the log moved when
        either did (a leader sends it to its followers then: issue 18)."""
        with self._lock:
            return self._config_generation, self.offsets.version

    def state_snapshot(self, *, config: bool, offsets: bool) -> tuple[tuple[int, int], bytes]:
        """The versions and a JSON snapshot of the config (topics, groups, modes and the
        config epoch; members are each pod's own) and/or of the committed offsets."""
        with self._lock:
            version = (self._config_generation, self.offsets.version)
            state: dict[str, Any] = {}
            if config:
                state["config"] = self.metadata.to_json()
                del state["config"]["members"]
            if offsets:
                state["offsets"] = self.offsets.to_json()
        return version, json.dumps(state, separators=(",", ":")).encode()

    async def apply_state(self, snapshot: bytes) -> None:
        """A follower's side: its leader's config and/or offsets (``state_snapshot``) replace
        its own. Consume queues of topics the leader deleted go as its went; members stay.
        The config is durable when this returns; offsets are persisted as commits are."""
        try:
            state = json.loads(snapshot)
            raw_config = state.get("config")
            raw_offsets = state.get("offsets")
        except (ValueError, AttributeError) as exc:
            raise InvalidArgument(f"malformed replicated state: {exc}") from exc
        offsets = OffsetTable.from_json(raw_offsets) if raw_offsets is not None else None
        generation = 0
        with self._lock:
            if raw_config is not None:
                metadata = Metadata.from_json({**raw_config, "members": []})
                metadata.members = self.metadata.members
                for key in [k for k in self._cqs if k[0] not in metadata.topics]:
                    self._cqs.pop(key).destroy()
                    self._next_queue_offset.pop(key, None)
                self.metadata = metadata
                generation = self._config_changed_locked()
            if offsets is not None:
                self.offsets.replace(offsets)
        if generation:
            await self._config_durable(generation)

    def clamp_offsets(self) -> list[CommittedOffset]:
        """A new leader's, before it serves: committed offsets past their queue's end come
        back to it, and the moved rows are returned. The old leader may have committed past
        records it appended but never replicated (a consumer popped them while the SYNC
        append waited); their sender was not answered, and the new leader's next records at
        those queue offsets must be delivered, not skipped."""
        moved: list[CommittedOffset] = []
        with self._lock:
            for (group, topic, queue_id), offset in list(self.offsets.offsets.items()):
                end = self._next_queue_offset.get((topic, queue_id), 0)
                if offset > end:
                    self.offsets.commit(
                        group=group, topic=topic, queue_id=queue_id, queue_offset=end
                    )
                    moved.append(CommittedOffset(group, topic, queue_id, offset))
        return moved

    async def _durable(
        self, results: list[AppendResult], end: int, takebacks: int
    ) -> list[AppendResult]:
        """``results`` once the batch ending at ``end`` is as durable as the flush mode
        promises: on disk in SYNC mode, at once in ASYNC mode."""
        if self.settings.flush_mode is FlushMode.SYNC:
            await self.flusher.wait_flushed(end, takebacks=takebacks)
        return results

    def _append(
        self, items: Sequence[_Item], prepare: Callable[[_Item], _Prepared]
    ) -> tuple[list[AppendResult], int, int]:
        """Write and (in ASYNC mode) dispatch; returns the results, the batch end and the
        flusher's take-back count seen under the lock."""
        if self._closed:
            raise StoreClosed("store is closed")
        if self._fsync_failure:
            raise StoreError(self._fsync_failure)
        if not items:
            raise InvalidArgument("append needs at least one message")
        now_ms = self.clock()
        prepared = [prepare(item) for item in items]
        with self._lock:
            records: list[Placeable] = []
            offsets: list[int] = []
            assigned: dict[QueueKey, int] = {}
            for item in prepared:
                key = (item.topic, item.queue_id)
                self._check_queue_locked(item.topic, item.queue_id)
                offset = assigned.get(key, self._next_queue_offset.get(key, 0))
                assigned[key] = offset + 1
                offsets.append(offset)
                records.append(item.at(offset, now_ms))
            try:
                placed = self.commitlog.place(records)
            except StoreFull as exc:
                self._last_error = str(exc)
                raise
            self._last_error = ""
            self._next_queue_offset.update(assigned)
            results = []
            for item, offset, where in zip(prepared, offsets, placed, strict=True):
                results.append(
                    AppendResult(
                        topic=item.topic,
                        queue_id=item.queue_id,
                        queue_offset=offset,
                        physical_offset=where.physical_offset,
                        size=where.size,
                        store_timestamp_ms=now_ms,
                    )
                )
                self._pending.append(
                    _Dispatch(
                        item.topic,
                        item.queue_id,
                        offset,
                        where.physical_offset,
                        where.size,
                        filters.tag_hash(item.tag),
                        placed[0].physical_offset,
                    )
                )
            end = self.commitlog.end
            if self.settings.flush_mode is FlushMode.ASYNC:
                self.dispatch_upto_locked(end)
            takebacks = self.flusher.takebacks
        self.flusher.poke()
        return results, end, takebacks

    def _prepare(self, message: MessageToAppend) -> _Prepared:
        topic, host, props = appending.checked_parts(message)
        appending.check_sizes(
            self.settings, body_size=len(message.body), properties_size=len(props)
        )
        return _Prepared(
            message.topic,
            message.queue_id,
            message.properties.get(PROPERTY_TAGS, ""),
            (topic, host, props, message),
        )

    def _prepare_record(self, raw: bytes) -> _Prepared:
        unplaced = appending.checked_unplaced(raw, self.settings)
        return _Prepared(
            unplaced.topic,
            unplaced.queue_id,
            unplaced.properties.get(PROPERTY_TAGS, ""),
            raw,
        )

    def _check_queue_locked(self, topic: str, queue_id: int) -> None:
        config = self.metadata.topics.get(topic)
        if config is None and (topic.startswith((names.RETRY_PREFIX, names.DLQ_PREFIX))):
            config = self.metadata.ensure_system_topic(topic, 1)
            self._persist_metadata_locked()
        if config is None:
            raise UnknownTopic(f"topic {topic!r} does not exist on {self.settings.broker_name}")
        if not 0 <= queue_id < config.queue_nums:
            raise UnknownTopic(f"topic {topic!r} has no queue {queue_id}")

    def dispatch_upto_locked(self, limit: int) -> None:
        """Index pending records that end at or below ``limit`` and announce them.

        When the disk is too full for a consume-queue entry, the batch of the record
        that failed and every record placed after it are taken back
        (``_take_back_locked``) and ``StoreFull`` is raised: an append is either
        indexed whole or gone, never half there or in the log but unreadable.
        """
        if not self._pending:
            return
        ready = next(
            (i for i, item in enumerate(self._pending) if item.end > limit), len(self._pending)
        )
        by_queue: dict[QueueKey, list[int]] = {}  # pending indices per queue, in log order
        for index, item in enumerate(self._pending[:ready]):
            by_queue.setdefault((item.topic, item.queue_id), []).append(index)
        failure: StoreFull | None = None
        pending = self._pending
        queues = list(by_queue.items())
        for done_queues, ((topic, queue_id), indices) in enumerate(queues):
            cq = self._open_cq(topic, queue_id)
            first = pending[indices[0]].queue_offset
            try:  # one write per queue (and file) for the batch, not one per record
                cq.append_many(
                    first,
                    [(pending[i].physical_offset, pending[i].size, pending[i].tag_hash)
                     for i in indices],
                )  # fmt: skip
            except StoreFull as exc:
                failure = exc
                # the first record not indexed: this queue's first unwritten one, or the
                # first of a queue not reached; every record before it is indexed
                unwritten = [indices[cq.max_queue_offset - first]]
                unwritten += [later[0] for _, later in queues[done_queues + 1 :]]
                ready = self._take_back_locked(min(unwritten))
                break
        done, self._pending = self._pending[:ready], self._pending[ready:]
        if done:
            self._dispatched_position = max(self._dispatched_position, done[-1].end)
        if done and self._listeners:
            # One arrival per queue per dispatched batch, its last entry: arrivals are
            # hints (``StoreApi.arrivals``), and a batch of 32 to one queue wakes once.
            last = {(i.topic, i.queue_id): i for i in done}
            arrivals = [
                Arrival(i.topic, i.queue_id, i.queue_offset, i.tag_hash) for i in last.values()
            ]
            here = _running_loop()
            for listener in list(self._listeners):
                wanted = arrivals
                if listener.topic is not None:
                    wanted = [a for a in arrivals if a.topic == listener.topic]
                if not wanted:
                    continue
                # One hand-off per dispatched batch, not per record. On the listener's own
                # loop (ASYNC mode dispatches in the append) a plain call_soon: the
                # thread-safe one writes the loop's self-pipe and costs a wake-up per append.
                if listener.loop is here:
                    listener.loop.call_soon(listener.offer_many, wanted)
                else:
                    listener.loop.call_soon_threadsafe(listener.offer_many, wanted)
        if failure is not None:
            self._last_error = str(failure)
            raise failure

    def _take_back_locked(self, failed: int) -> int:
        """Remove ``_pending[failed]``'s batch and everything after it from the log and
        the consume queues; return how many pending records stay (all indexed).

        Nothing taken back was acknowledged: in ASYNC mode it is the failing append's
        own batch, in SYNC mode appends whose fsync waiters the flusher fails next.
        """
        start = self._pending[failed].batch_start
        keep = next(i for i, item in enumerate(self._pending) if item.physical_offset >= start)
        for item in reversed(self._pending[keep:failed]):  # indexed parts of the batch
            self._cqs[(item.topic, item.queue_id)].truncate_to(item.queue_offset)
        for item in self._pending[keep:]:
            key = (item.topic, item.queue_id)
            current = self._next_queue_offset.get(key, item.queue_offset)
            self._next_queue_offset[key] = min(current, item.queue_offset)
        self.commitlog.file.truncate(start)
        log.error(
            "disk full while indexing: took back %d unacknowledged records from physical offset %d",
            len(self._pending) - keep,
            start,
        )
        del self._pending[keep:]
        return keep

    # ------------------------------------------------------------------ reading

    async def read(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        *,
        max_count: int,
        tag_filter: str = "*",
        max_scan: int = 800,
    ) -> ReadResult:
        return self.read_now(
            topic,
            queue_id,
            queue_offset,
            max_count=max_count,
            tag_filter=tag_filter,
            max_scan=max_scan,
        )

    def read_now(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        *,
        max_count: int,
        tag_filter: str = "*",
        max_scan: int = 800,
    ) -> ReadResult:
        """Synchronous ``read`` for tools and the dump command."""
        if not 1 <= max_count <= MAX_READ_COUNT:
            raise InvalidArgument(f"max_count must be in 1..{MAX_READ_COUNT}")
        if max_scan < max_count:
            raise InvalidArgument("max_scan must be >= max_count")
        parsed = filters.parse_filter(tag_filter)
        hashes = parsed.hashes
        with self._lock:
            cq = self._cqs.get((topic, queue_id))
            status, low, high = self._read_status_locked(
                cq, topic=topic, queue_id=queue_id, queue_offset=queue_offset
            )
            if status is not ReadStatus.FOUND or cq is None:
                return ReadResult(
                    status, (), _next_offset(status, queue_offset, low=low, high=high), low, high
                )
            found: list[StoredMessage] = []
            next_offset = queue_offset
            scan_end = min(queue_offset + max_scan, high)
            chunk = max(max_count, 64)
            while next_offset < scan_end and len(found) < max_count:
                entries = cq.raw_entries(next_offset, min(chunk, scan_end - next_offset))
                if not entries:
                    break
                # The entries whose tag hash matches, up to what is still wanted, read at
                # once (nearby records in one span); a hash collision is dropped after the
                # read and the scan goes on from behind the last entry taken.
                wanted = max_count - len(found)
                offsets: list[int] = []
                extents: list[tuple[int, int]] = []
                for physical, size, tag_hash in entries:  # tuples: no object per entry
                    next_offset += 1
                    if parsed.matches_hash(tag_hash, hashes):
                        offsets.append(next_offset - 1)
                        extents.append((physical, size))
                        if len(extents) >= wanted:
                            break
                read = self.commitlog.read_verified_many(extents)
                for entry_offset, (raw, fields) in zip(offsets, read, strict=True):
                    message = self._checked_stored(entry_offset, raw, fields)
                    if parsed.matches_all or parsed.matches_tag(message.tag):
                        found.append(message)  # else a hash collision
            status = ReadStatus.FOUND if found else ReadStatus.NO_MATCHED_MESSAGE
            return ReadResult(status, tuple(found), next_offset, low, high)

    def read_columns(
        self, topic: str, queue_id: int, queue_offset: int, *, max_count: int
    ) -> MessageColumns:
        """Up to ``max_count`` messages from ``queue_offset``, unfiltered, as columns.

        :meth:`read_now` without a tag filter and without an object per message, for bulk
        readers (the admin API's revive-log batches); every record is verified as there.
        """
        if not 1 <= max_count <= MAX_READ_COUNT:
            raise InvalidArgument(f"max_count must be in 1..{MAX_READ_COUNT}")
        with self._lock:
            cq = self._cqs.get((topic, queue_id))
            status, low, high = self._read_status_locked(
                cq, topic=topic, queue_id=queue_id, queue_offset=queue_offset
            )
            if status is not ReadStatus.FOUND or cq is None:
                at = _next_offset(status, queue_offset, low=low, high=high)
                return MessageColumns(status, [], [], [], [], at, low, high)
            count = min(max_count, high - queue_offset)
            entries = cq.raw_entries(queue_offset, count)
            extents = [(physical, size) for physical, size, _ in entries]
            columns = self.commitlog.read_many(extents)
        for index, found in enumerate(columns.queue_offsets):
            if found != queue_offset + index:
                raise CorruptStore(
                    f"consume queue entry for queue offset {queue_offset + index} points at "
                    f"physical offset {extents[index][0]}, which holds {columns.topics[index]} "
                    f"queue {columns.queue_ids[index]} offset {found}"
                )
        read = len(columns.queue_offsets)
        return MessageColumns(
            ReadStatus.FOUND if read else ReadStatus.NO_MATCHED_MESSAGE,
            columns.queue_offsets,
            columns.stored_ms,
            columns.properties,
            columns.bodies,
            queue_offset + read,
            low,
            high,
        )

    def _read_status_locked(
        self, cq: ConsumeQueue | None, *, topic: str, queue_id: int, queue_offset: int
    ) -> tuple[ReadStatus, int, int]:
        """:meth:`read_now`'s answer before reading: FOUND when there is something to read."""
        if cq is None:
            config = self.metadata.topics.get(topic)
            if config is None or not 0 <= queue_id < config.queue_nums:
                return ReadStatus.NO_SUCH_QUEUE, 0, 0
            return ReadStatus.NO_MESSAGE_IN_QUEUE, 0, 0
        low, high = cq.min_queue_offset, cq.max_queue_offset
        if high == 0:
            return ReadStatus.NO_MESSAGE_IN_QUEUE, low, high
        if queue_offset < low:
            return ReadStatus.OFFSET_TOO_SMALL, low, high
        if queue_offset == high:
            return ReadStatus.OFFSET_OVERFLOW_ONE, low, high
        if queue_offset > high:
            return ReadStatus.OFFSET_OVERFLOW_BADLY, low, high
        return ReadStatus.FOUND, low, high

    @staticmethod
    def _checked_stored(queue_offset: int, raw: bytes, fields: fmt.RecordFields) -> StoredMessage:
        """The message of a verified record (read where its entry points: the record's own
        physical offset was checked against it), checked to be the consume-queue entry's."""
        message = StoredMessage.from_record(raw, fields)
        if message.queue_offset != queue_offset:
            raise CorruptStore(
                f"consume queue entry for queue offset {queue_offset} points at physical "
                f"offset {message.physical_offset}, which holds {message.topic} queue "
                f"{message.queue_id} offset {message.queue_offset}"
            )
        return message

    async def bounds(self, topic: str, queue_id: int) -> QueueBounds:
        with self._lock:
            cq = self._cqs.get((topic, queue_id))
            if cq is None:
                config = self.metadata.topics.get(topic)
                if config is None or not 0 <= queue_id < config.queue_nums:
                    raise UnknownTopic(f"topic {topic!r} has no queue {queue_id}")
                return QueueBounds(topic, queue_id, 0, 0)
            return QueueBounds(topic, queue_id, cq.min_queue_offset, cq.max_queue_offset)

    def arrivals(self, topic: str | None = None) -> ArrivalStream:
        """Subscribe now: entries dispatched after this call are announced (``StoreApi``)."""
        listener = _ArrivalListener(asyncio.get_running_loop(), topic)
        with self._lock:
            self._listeners.add(listener)
        return ArrivalStream(self, listener)

    def _unsubscribe(self, listener: _ArrivalListener) -> None:
        with self._lock:
            self._listeners.discard(listener)

    # ------------------------------------------------------------------ offsets

    async def commit_offset(
        self, *, group: str, topic: str, queue_id: int, queue_offset: int
    ) -> None:
        with self._lock:
            self.offsets.commit(
                group=group, topic=topic, queue_id=queue_id, queue_offset=queue_offset
            )

    async def committed_offset(self, *, group: str, topic: str, queue_id: int) -> int | None:
        with self._lock:
            return self.offsets.get(group, topic, queue_id)

    async def committed_offsets(self, group: str | None = None) -> list[CommittedOffset]:
        with self._lock:
            return self.offsets.rows(group)

    async def delete_offsets(self, group: str, topic: str | None = None) -> None:
        with self._lock:
            self.offsets.delete(group, topic)

    # ------------------------------------------------------------------ configuration

    async def put_topic(self, topic: TopicConfig) -> TopicConfig:
        with self._lock:
            result = self.metadata.put_topic(topic)
            generation = self._config_changed_locked()
        await self._config_durable(generation)
        return result

    async def delete_topic(self, name: str) -> None:
        with self._lock:
            if name not in self.metadata.topics:
                raise UnknownTopic(f"topic {name!r} does not exist")
            if names.is_system_topic(name):
                raise InvalidArgument(f"system topic {name!r} cannot be deleted")
            self.metadata.delete_topic(name)
            self.offsets.delete_topic(name)
            for key in [k for k in self._cqs if k[0] == name]:
                self._cqs.pop(key).destroy()
                self._next_queue_offset.pop(key, None)
            generation = self._config_changed_locked()
        await self._config_durable(generation)

    async def topics(self) -> list[TopicConfig]:
        with self._lock:
            return sorted(self.metadata.topics.values(), key=lambda t: t.name)

    async def topic(self, name: str) -> TopicConfig | None:
        """One topic (system ones too), or None: O(1), for the admin API's per-object reads."""
        with self._lock:
            return self.metadata.topics.get(name)

    async def put_group(self, group: GroupConfig) -> GroupConfig:
        with self._lock:
            result = self.metadata.put_group(group)
            generation = self._config_changed_locked()
        await self._config_durable(generation)
        return result

    async def delete_group(self, name: str) -> None:
        with self._lock:
            if not self.metadata.delete_group(name):
                raise UnknownGroup(f"group {name!r} does not exist")
            self.offsets.delete(name)
            generation = self._config_changed_locked()
        await self._config_durable(generation)

    async def groups(self) -> list[GroupConfig]:
        with self._lock:
            return sorted(self.metadata.groups.values(), key=lambda g: g.name)

    async def group(self, name: str) -> GroupConfig | None:
        """One group, or None: O(1), for the admin API's per-object reads."""
        with self._lock:
            return self.metadata.groups.get(name)

    async def put_consume_mode(self, mode: ConsumeModeConfig) -> ConsumeModeConfig:
        with self._lock:
            result = self.metadata.put_mode(mode)
            generation = self._config_changed_locked()
        await self._config_durable(generation)
        return result

    async def consume_modes(self) -> list[ConsumeModeConfig]:
        with self._lock:
            return sorted(self.metadata.modes.values(), key=lambda m: (m.group, m.topic))

    async def consume_mode(self, *, group: str, topic: str) -> ConsumeModeConfig | None:
        """The mode set for (group, topic), or None when never set: O(1)."""
        with self._lock:
            return self.metadata.modes.get((group, topic))

    async def set_members(self, members: Sequence[ClusterMember]) -> None:
        with self._lock:
            self.metadata.set_members(members)
            generation = self._config_changed_locked()
        await self._config_durable(generation)

    async def members(self) -> list[ClusterMember]:
        with self._lock:
            return list(self.metadata.members)

    # ------------------------------------------------------------------ retention

    def run_retention(self) -> list[int]:
        """Delete expired segments now; returns the deleted bases (see ``retention``)."""
        settings = self.settings
        with self._lock:
            file = self.commitlog.file
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
                now_ms=self.clock(),
                retention_ms=int(settings.retention_hours * 3_600_000),
                max_bytes=settings.retention_max_bytes,
            )
            if not doomed:
                return []
            new_min = doomed[-1] + settings.segment_bytes
            self._warn_unconsumed_locked(new_min)
            file.delete_before(new_min)
            for cq in self._cqs.values():
                cq.advance_min(new_min)
            log.info("retention deleted commit-log segments %s", doomed)
            return doomed

    def _warn_unconsumed_locked(self, new_min: int) -> None:
        for row in self.offsets.rows():
            cq = self._cqs.get((row.topic, row.queue_id))
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


def _next_offset(status: ReadStatus, queue_offset: int, *, low: int, high: int) -> int:
    """Where the next read should start after a read that found nothing to read."""
    if status is ReadStatus.OFFSET_TOO_SMALL:
        return low
    if status is ReadStatus.OFFSET_OVERFLOW_ONE:
        return queue_offset
    if status is ReadStatus.OFFSET_OVERFLOW_BADLY:
        return high
    return 0  # no such queue, no message in the queue
