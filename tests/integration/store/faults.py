"""Fault injection for the store's recovery, crash and disk-full tests.

Everything here works on real files: a test writes through ``LocalStore``, closes
it, damages bytes on disk with the helpers below, reopens and compares what it
reads with what it wrote, byte for byte (``assert_reads_exactly``). Nothing here
reaches into the store's objects; the only format knowledge is the documented byte
layout of ``popbroker.store.format`` (field positions inside a record) and of
``popbroker.store.flushmark`` (written through its own ``write``).

Bodies are a pure function of ``(seed, queue_id, queue_offset)`` (``body_for``), so
a crash test can check every record it finds after a restart, acknowledged or not:
a record that is present but differs from what the writer would have written is
"silently wrong", which no fault may cause.

The crash writer subprocess (``_proc.py``) is started with ``start_writer`` and
its acknowledgement lines read by ``AckReader`` with bounded deadlines.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from popbroker.store import flushmark
from popbroker.store.api import (
    AppendResult,
    FlushMode,
    ReadStatus,
    StoredMessage,
    TopicConfig,
)
from popbroker.store.local import LocalStore
from popbroker.store.settings import StoreSettings
from tests.integration.store import _proc

TOPIC = _proc.TOPIC
QUEUES = 4
SEGMENT_BYTES = 64 * 1024
PROC = Path(__file__).with_name("_proc.py")

# Field positions inside a commit-log record (popbroker.store.format docstring).
FIELD_AT = {
    "total_size": 1,  # a byte of the u32 length (not the top one: keep it plausible)
    "magic": 4,
    "crc": 6,
    "physical_offset": 16,
    "queue_offset": 28,
}


def settings(**overrides: object) -> StoreSettings:
    """Small segments (several per test) and small consume-queue files."""
    return _proc.writer_settings(segment_bytes=SEGMENT_BYTES, **overrides)


# ---------------------------------------------------------------------- writing


@dataclass(frozen=True, slots=True)
class Written:
    """One acknowledged append, as the writer knows it."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    body: bytes
    tag: str

    @property
    def end(self) -> int:
        return self.physical_offset + self.size


def open_store(
    data_dir: Path, store_settings: StoreSettings, *, repair: bool = False
) -> LocalStore:
    return LocalStore.open(data_dir, store_settings, repair=repair)


async def _populate(
    store: LocalStore, *, count: int, seed: int, queues: int, first: dict[int, int]
) -> list[Written]:
    await store.put_topic(TopicConfig(name=TOPIC, read_queue_nums=queues, write_queue_nums=queues))
    written: list[Written] = []
    next_offset = dict(first)
    for index in range(count):  # round-robin, one message per append
        queue_id = index % queues
        queue_offset = next_offset.get(queue_id, 0)
        message = _proc.message(seed, queue_id, queue_offset)
        [result] = await store.append([message])
        written.append(_written(result, message.body, _proc.tag_for(queue_offset)))
        next_offset[queue_id] = result.queue_offset + 1
    return written


def _written(result: AppendResult, body: bytes, tag: str) -> Written:
    return Written(
        topic=result.topic,
        queue_id=result.queue_id,
        queue_offset=result.queue_offset,
        physical_offset=result.physical_offset,
        size=result.size,
        body=body,
        tag=tag,
    )


def populate(
    data_dir: Path,
    store_settings: StoreSettings,
    *,
    count: int,
    seed: int = 7,
    queues: int = QUEUES,
    earlier: Sequence[Written] = (),
) -> list[Written]:
    """Open, append ``count`` messages round-robin over ``queues``, close cleanly.

    ``earlier`` are the writes of a previous call on the same directory; the new
    writes continue their queue offsets (and bodies stay ``body_for`` of them).
    """
    first: dict[int, int] = {}
    for w in earlier:
        first[w.queue_id] = max(first.get(w.queue_id, 0), w.queue_offset + 1)

    async def scenario() -> list[Written]:
        store = open_store(data_dir, store_settings)
        try:
            return await _populate(store, count=count, seed=seed, queues=queues, first=first)
        finally:
            await store.close()

    return asyncio.run(scenario())


# ---------------------------------------------------------------------- reading


def read_queue(store: LocalStore, topic: str, queue_id: int) -> list[StoredMessage]:
    """Every message of one queue, from its minimum to its maximum, in order."""
    found: list[StoredMessage] = []
    result = store.read_now(topic, queue_id, 0, max_count=64, max_scan=64)
    if result.status is ReadStatus.OFFSET_TOO_SMALL:
        result = store.read_now(topic, queue_id, result.next_queue_offset, max_count=64)
    for _ in range(100_000):  # bounded: far more than any test writes
        if result.status is not ReadStatus.FOUND:
            break
        found.extend(result.messages)
        result = store.read_now(
            topic, queue_id, result.next_queue_offset, max_count=64, max_scan=64
        )
    assert result.status in (
        ReadStatus.OFFSET_OVERFLOW_ONE,
        ReadStatus.NO_MESSAGE_IN_QUEUE,
    ), f"{topic}/{queue_id}: read stopped with {result.status} at {result.next_queue_offset}"
    return found


def by_queue(written: Sequence[Written]) -> dict[tuple[str, int], list[Written]]:
    grouped: dict[tuple[str, int], list[Written]] = {}
    for w in written:
        grouped.setdefault((w.topic, w.queue_id), []).append(w)
    return grouped


def assert_reads_exactly(
    store: LocalStore,
    written: Sequence[Written],
    *,
    queues: int = QUEUES,
    skip: Sequence[int] = (),
) -> None:
    """Each queue holds exactly ``written``, dense from 0, byte for byte, nothing more."""
    grouped = by_queue(written)
    for queue_id in range(queues):
        if queue_id in skip:
            continue
        expected = sorted(grouped.get((TOPIC, queue_id), []), key=lambda w: w.queue_offset)
        actual = read_queue(store, TOPIC, queue_id)
        assert [m.queue_offset for m in actual] == list(range(len(actual))), (
            f"queue {queue_id}: offsets are not dense from 0"
        )
        assert len(actual) == len(expected), (
            f"queue {queue_id}: read {len(actual)} messages, wrote {len(expected)}"
        )
        for want, got in zip(expected, actual, strict=True):
            assert got.queue_offset == want.queue_offset
            assert got.physical_offset == want.physical_offset, (
                f"queue {queue_id} offset {want.queue_offset} moved in the commit log"
            )
            assert got.body == want.body, f"queue {queue_id} offset {want.queue_offset}: body"
            assert got.tag == want.tag
            assert got.topic == TOPIC
            assert got.queue_id == queue_id
            assert got.born_host == "10.0.0.1:4242"


def snapshot(store: LocalStore, *, queues: int = QUEUES) -> dict[int, list[StoredMessage]]:
    return {q: read_queue(store, TOPIC, q) for q in range(queues)}


# ---------------------------------------------------------------------- damaging files


def commitlog_segments(data_dir: Path) -> list[Path]:
    return sorted(p for p in (data_dir / "commitlog").iterdir() if p.name.isdigit())


def locate(
    data_dir: Path, physical_offset: int, segment_bytes: int = SEGMENT_BYTES
) -> tuple[Path, int]:
    """The segment file holding ``physical_offset`` and the position inside it."""
    base = physical_offset - physical_offset % segment_bytes
    return data_dir / "commitlog" / f"{base:020d}", physical_offset - base


def in_last_segment(data_dir: Path, written: Sequence[Written]) -> list[Written]:
    """The records of ``written`` that lie in the newest commit-log segment."""
    last = commitlog_segments(data_dir)[-1]
    return [w for w in written if locate(data_dir, w.physical_offset)[0] == last]


def flip_byte(path: Path, position: int) -> None:
    with path.open("r+b") as f:
        f.seek(position)
        [value] = f.read(1)
        f.seek(position)
        f.write(bytes([value ^ 0x5A]))


def flip_record_byte(data_dir: Path, record: Written, field: str) -> int:
    """Flip one byte of ``record`` (a named header field or ``body``); its physical offset."""
    at = record.size - 2 if field == "body" else FIELD_AT[field]
    path, position = locate(data_dir, record.physical_offset)
    flip_byte(path, position + at)
    return record.physical_offset + at


def cut_file(path: Path, size: int) -> None:
    os.truncate(path, size)


def append_to_file(path: Path, data: bytes) -> None:
    with path.open("ab") as f:
        f.write(data)


def set_flush_checkpoint(data_dir: Path, physical_offset: int) -> None:
    """Rewind the checkpoint, as if the process died after persisting it at that point."""
    flushmark.write(
        data_dir / "checkpoint",
        flushmark.FlushMark(
            flushed_physical_offset=physical_offset, dispatched_physical_offset=physical_offset
        ),
    )


def consume_queue_dir(data_dir: Path, queue_id: int, topic: str = TOPIC) -> Path:
    return data_dir / "consumequeue" / topic / str(queue_id)


# ---------------------------------------------------------------------- tmpfs


@contextlib.contextmanager
def mounted_tmpfs(directory: Path, *, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` at ``directory``; fails the test (never skips) if it cannot."""
    directory.mkdir(parents=True, exist_ok=True)
    mount = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    if mount.returncode != 0:
        pytest.fail(
            f"cannot mount a {size} tmpfs at {directory} (the disk-full tests need root and "
            f"CAP_SYS_ADMIN): exit {mount.returncode}: {mount.stderr.strip()}",
            pytrace=False,
        )
    try:
        yield directory
    finally:
        umount = subprocess.run(
            ["umount", str(directory)], capture_output=True, text=True, check=False, timeout=30
        )
        if umount.returncode != 0:
            # never leave a mount behind; then say why (usually files left open)
            subprocess.run(["umount", "-l", str(directory)], check=True, timeout=30)
            pytest.fail(f"tmpfs at {directory} was busy at teardown: {umount.stderr.strip()}")


# ---------------------------------------------------------------------- the crash writer


@dataclass(frozen=True, slots=True)
class Ack:
    """One ``ACK topic queue_id queue_offset sha256`` line of the writer."""

    topic: str
    queue_id: int
    queue_offset: int
    sha256: str


def start_writer(
    data_dir: Path,
    *,
    mode: FlushMode,
    seed: int,
    max_messages: int,
    max_seconds: float,
    stderr_path: Path,
) -> subprocess.Popen[str]:
    """Start ``_proc.py`` appending to ``data_dir`` until killed or done."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with stderr_path.open("w") as stderr:
        return subprocess.Popen(
            [
                sys.executable,
                str(PROC),
                "--data-dir",
                str(data_dir),
                "--flush-mode",
                mode.value,
                "--seed",
                str(seed),
                "--max-messages",
                str(max_messages),
                "--max-seconds",
                str(max_seconds),
                "--queues",
                str(QUEUES),
                "--segment-bytes",
                str(SEGMENT_BYTES),
            ],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=env,
        )


class AckReader:
    """Reads a writer's stdout on a thread; the test waits on it with deadlines."""

    def __init__(self, proc: subprocess.Popen[str], *, stderr_path: Path) -> None:
        assert proc.stdout is not None
        self._stdout = proc.stdout
        self._stderr_path = stderr_path
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.acks: list[Ack] = []
        self.other: list[str] = []
        self.eof = False
        self._thread = threading.Thread(target=self._pump, name="ack-reader", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        for line in self._stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _take(self, line: str | None) -> None:
        if line is None:
            self.eof = True
            return
        parts = line.split()
        if len(parts) == 5 and parts[0] == "ACK" and line.endswith("\n"):
            self.acks.append(Ack(parts[1], int(parts[2]), int(parts[3]), parts[4]))
        else:
            self.other.append(line)

    def wait_for_acks(self, count: int, *, timeout_s: float) -> None:
        """Block until ``count`` acks were read; fail if the writer ends or is too slow."""
        deadline = time.monotonic() + timeout_s
        while len(self.acks) < count:
            if self.eof:
                stderr = self._stderr_path.read_text(errors="replace")[-3000:]
                pytest.fail(
                    f"writer ended after {len(self.acks)} acks: {self.other[-5:]}\n{stderr}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                pytest.fail(f"only {len(self.acks)} of {count} acks within {timeout_s} s")
            try:
                self._take(self._lines.get(timeout=remaining))
            except queue.Empty:
                continue

    def drain(self, *, timeout_s: float) -> None:
        """Read everything up to end of file (the writer has exited)."""
        deadline = time.monotonic() + timeout_s
        try:
            while not self.eof:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    pytest.fail("writer's stdout did not close after it exited")
                with contextlib.suppress(queue.Empty):
                    self._take(self._lines.get(timeout=remaining))
            self._thread.join(timeout=max(0.0, deadline - time.monotonic()))
        finally:
            if not self._thread.is_alive():
                self._stdout.close()


def kill_hard(proc: subprocess.Popen[str], *, timeout_s: float = 10) -> None:
    """SIGKILL a process this test started, and reap it."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=timeout_s)


def assert_acks_survived(
    data_dir: Path, acks: Sequence[Ack], *, seed: int, store_settings: StoreSettings
) -> dict[int, int]:
    """Reopen ``data_dir`` in this process and check it against the writer's promises.

    Every acknowledged append is readable byte for byte at its queue offset; each
    queue is dense from 0 and in order; and every record present, acknowledged or
    not, is exactly what the writer wrote there. Returns the length of each queue.
    """
    acked: dict[int, list[Ack]] = {}
    for ack in acks:
        assert ack.topic == TOPIC
        acked.setdefault(ack.queue_id, []).append(ack)
    store = open_store(data_dir, store_settings)
    try:
        lengths: dict[int, int] = {}
        for queue_id in range(QUEUES):
            promised = acked.get(queue_id, [])
            # strictly increasing; gaps between writer lives are records that were
            # written but not yet acknowledged when the kill came (checked below too)
            offsets = [a.queue_offset for a in promised]
            assert offsets == sorted(set(offsets)), (
                f"queue {queue_id}: the writer acknowledged offsets out of order"
            )
            messages = read_queue(store, TOPIC, queue_id)
            assert [m.queue_offset for m in messages] == list(range(len(messages))), (
                f"queue {queue_id}: offsets are not dense from 0"
            )
            assert not promised or len(messages) > promised[-1].queue_offset, (
                f"queue {queue_id}: offset {promised[-1].queue_offset} acknowledged, "
                f"{len(messages)} messages readable after the crash"
            )
            for ack in promised:
                assert _proc.sha_of(messages[ack.queue_offset].body) == ack.sha256, (
                    f"queue {queue_id} offset {ack.queue_offset}: acknowledged body differs"
                )
            for message in messages:
                expected = _proc.body_for(seed, queue_id, message.queue_offset)
                assert message.body == expected, (
                    f"queue {queue_id} offset {message.queue_offset}: a record that was "
                    "never written"
                )
                assert message.tag == _proc.tag_for(message.queue_offset)
            lengths[queue_id] = len(messages)
        return lengths
    finally:
        store.close_sync()
