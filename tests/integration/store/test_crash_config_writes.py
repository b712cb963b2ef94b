"""Crash: kill -9 during concurrent config writes loses no answered change.

A writer subprocess (``_config_proc.py``) puts topics and groups from eight
concurrent tasks (so the store group-commits their rewrites of
``config/metadata.json``) and prints an ack line after each change is answered.
The test SIGKILLs it at a seeded random point, reopens the store in this process
and checks every promise: each acknowledged topic and group is there. The config
epoch stays the same across the kills (the store restarted from its own file, not
from an empty or restored one). Two rounds on the same directory.
"""

from __future__ import annotations

import os
import queue
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from popbroker.store.local import LocalStore
from popbroker.store.settings import StoreSettings
from tests.integration.store import faults

PROC = Path(__file__).with_name("_config_proc.py")
ROUNDS = 2


class _Lines:
    """The writer's stdout, read on a thread; the test waits on it with deadlines."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        self._stdout = proc.stdout
        self._queue: queue.Queue[str | None] = queue.Queue()
        self.lines: list[str] = []
        self.eof = False
        self._thread = threading.Thread(target=self._pump, name="config-acks", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        for line in self._stdout:
            self._queue.put(line)
        self._queue.put(None)

    def _take(self, timeout_s: float) -> None:
        line = self._queue.get(timeout=timeout_s)
        if line is None:
            self.eof = True
        elif line.endswith("\n"):  # a torn last line is no promise
            self.lines.append(line.strip())

    def acks(self) -> list[tuple[str, str]]:
        return [
            (parts[1], parts[2])
            for parts in (line.split() for line in self.lines)
            if parts[0] == "ACK"
        ]

    def wait_for_acks(self, count: int, *, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.acks()) < count:
            remaining = deadline - time.monotonic()
            if self.eof or remaining <= 0:
                pytest.fail(f"{len(self.acks())} of {count} acks; writer said {self.lines[-3:]}")
            try:
                self._take(remaining)
            except queue.Empty:
                continue

    def drain(self, *, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.eof:
            self._take(max(0.01, deadline - time.monotonic()))
        self._thread.join(timeout=timeout_s)
        self._stdout.close()


def _start(data_dir: Path, *, round_no: int, stderr_path: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with stderr_path.open("w") as stderr:
        return subprocess.Popen(
            [sys.executable, str(PROC), "--data-dir", str(data_dir), "--round", str(round_no)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=env,
        )


@pytest.mark.timeout(90)
async def test_every_answered_config_change_survives_kill_9(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    rng = random.Random(20261125)
    acked: list[tuple[str, str]] = []
    epochs: list[str] = []
    for round_no in range(ROUNDS):
        proc = _start(data_dir, round_no=round_no, stderr_path=tmp_path / f"w{round_no}.stderr")
        lines = _Lines(proc)
        try:
            lines.wait_for_acks(rng.randint(100, 400), timeout_s=40)
        finally:
            faults.kill_hard(proc)
            lines.drain(timeout_s=10)  # acks printed before the kill count too
        assert proc.returncode == -9, "the writer must die by SIGKILL, not finish"
        acked.extend(lines.acks())
        epochs.extend(line.split()[1] for line in lines.lines if line.startswith("EPOCH "))
        store = LocalStore.open(data_dir, StoreSettings())
        try:
            topics = {t.name for t in await store.topics()}
            groups = {g.name for g in await store.groups()}
            epochs.append((await store.info()).config_epoch)
        finally:
            await store.close()
        missing = [
            (kind, name)
            for kind, name in acked
            if name not in (topics if kind == "topic" else groups)
        ]
        assert missing == [], f"answered changes lost by the kill: {missing[:5]}"
    assert len(acked) >= ROUNDS * 100
    assert len(set(epochs)) == 1, epochs
