"""A real store process behind the wire API, for the cross-process contract suite.

    from tests.integration.store.remote_fixture import store_process_factory

    @pytest.fixture
    async def store(tmp_path):
        with store_process_factory(tmp_path) as spawn:
            remote = await spawn(settings=small_settings()).connect()  # on this loop
            try:
                yield remote
            finally:
                await remote.close()

``spawn_store(data_dir, settings=...)`` starts ``python -m popbroker.roles.store``
on a Unix socket with exactly those ``StoreSettings``, waits until it answers
``Info`` (bounded by ``ready_timeout_s``; if the process exits first, fails at
once with its log) and returns a ``StoreProcess``. Connect from inside the
test's event loop with ``await process.connect()`` (a ``RemoteStore`` is bound
to the loop that creates it). ``kill()`` is SIGKILL by PID, for crash tests;
``restart()`` starts a new process on the same directory and socket.

``store_process_factory(tmp_path)`` (and the ``store_processes`` fixture built on
it) hands out such a ``spawn`` and kills, by PID, every process it started when
the block or test ends. Sockets live in a short directory under /tmp because
``sun_path`` holds 107 bytes and pytest's ``tmp_path`` can be longer.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import grpc
import pytest

from popbroker.roles import store as store_role
from popbroker.store.settings import StoreSettings
from popbroker.store.wire import store_pb2 as pb
from popbroker.store.wire import store_pb2_grpc as pb_grpc
from popbroker.store.wire.client import RemoteStore

READY_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0


@dataclass
class StoreProcess:
    """One ``popbroker.roles.store`` subprocess and where it serves."""

    data_dir: Path
    socket_path: Path
    extra_args: tuple[str, ...] = ()
    log_path: Path | None = None
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def target(self) -> str:
        return f"unix:{self.socket_path}"

    @property
    def pid(self) -> int:
        assert self.popen is not None, "not started"
        return self.popen.pid

    def start(self, *, ready_timeout_s: float = READY_TIMEOUT_S) -> StoreProcess:
        assert self.popen is None or self.popen.poll() is not None, "already running"
        self.log_path = self.socket_path.with_suffix(".log")
        argv = [
            sys.executable,
            "-m",
            "popbroker.roles.store",
            "--data-dir",
            str(self.data_dir),
            "--socket",
            str(self.socket_path),
            *self.extra_args,
        ]
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self._wait_ready(ready_timeout_s)
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        """Poll ``Info`` until it answers; fail at once if the process exits."""
        deadline = time.monotonic() + timeout_s
        with grpc.insecure_channel(self.target) as channel:
            stub = pb_grpc.StoreStub(channel)
            while True:
                if self.popen is not None and self.popen.poll() is not None:
                    raise RuntimeError(
                        f"store process exited with {self.popen.returncode}:\n{self.log()}"
                    )
                remaining_s = deadline - time.monotonic()
                if remaining_s <= 0:
                    self.kill()
                    raise TimeoutError(f"store not ready after {timeout_s}s:\n{self.log()}")
                try:
                    stub.Info(pb.InfoRequest(), timeout=min(0.5, remaining_s), wait_for_ready=True)
                    return
                except grpc.RpcError:
                    continue

    def log(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-4000:]

    async def connect(self, *, timeout_s: float = 10.0, framed: bool = True) -> RemoteStore:
        """A ``RemoteStore`` for this process, bound to the running event loop: its unary
        calls framed (``popbroker.store.wire.frames``), or all on gRPC."""
        store = RemoteStore.connect(self.target, timeout_s=timeout_s, frames_allowed=framed)
        await store.wait_ready(timeout_s)
        assert store.framed is framed, "the store process did not announce its frames socket"
        return store

    def kill(self) -> None:
        """SIGKILL by PID (a crash: no flush, no socket cleanup)."""
        if self.popen is not None and self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGKILL)
            self.popen.wait(STOP_TIMEOUT_S)

    def terminate(self) -> int:
        """SIGTERM by PID and wait for the clean stop; returns the exit status."""
        assert self.popen is not None
        if self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.popen.returncode

    def restart(self, *, crash: bool = False) -> StoreProcess:
        """Stop (SIGKILL when ``crash``, else SIGTERM) and start again on the same files."""
        if crash:
            self.kill()
        else:
            self.terminate()
        return self.start()


def short_socket_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="pf-store-", dir="/tmp"))


def settings_args(settings: StoreSettings | None) -> tuple[str, ...]:
    """Arguments that make the store process use exactly ``settings``."""
    if settings is None:
        return ()
    return ("--settings-json", store_role.settings_to_json(settings))


def spawn_store(
    data_dir: Path,
    *,
    socket_path: Path | None = None,
    settings: StoreSettings | None = None,
    extra_args: Sequence[str] = (),
    ready_timeout_s: float = READY_TIMEOUT_S,
) -> StoreProcess:
    """Start a store process serving ``data_dir`` and wait until it answers.

    The caller owns it: ``kill()`` or ``terminate()`` it (``store_processes`` does).
    """
    if socket_path is None:
        socket_path = short_socket_dir() / "store.sock"
    process = StoreProcess(data_dir, socket_path, settings_args(settings) + tuple(extra_args))
    return process.start(ready_timeout_s=ready_timeout_s)


class SpawnStore(Protocol):
    def __call__(
        self,
        data_dir: Path | None = None,
        *,
        settings: StoreSettings | None = None,
        extra_args: Sequence[str] = (),
        ready_timeout_s: float = READY_TIMEOUT_S,
    ) -> StoreProcess: ...


@contextlib.contextmanager
def store_process_factory(tmp_path: Path) -> Iterator[SpawnStore]:
    """The factory behind ``store_processes``, for fixtures of other names or scopes."""
    started: list[StoreProcess] = []
    socket_dirs: list[Path] = []

    def spawn(
        data_dir: Path | None = None,
        *,
        settings: StoreSettings | None = None,
        extra_args: Sequence[str] = (),
        ready_timeout_s: float = READY_TIMEOUT_S,
    ) -> StoreProcess:
        socket_dir = short_socket_dir()
        socket_dirs.append(socket_dir)
        process = StoreProcess(
            data_dir or tmp_path / f"store-{len(started)}",
            socket_dir / "store.sock",
            settings_args(settings) + tuple(extra_args),
        )
        started.append(process)
        return process.start(ready_timeout_s=ready_timeout_s)

    try:
        yield spawn
    finally:
        for process in started:
            process.kill()
        for socket_dir in socket_dirs:
            shutil.rmtree(socket_dir, ignore_errors=True)


@pytest.fixture
def store_processes(tmp_path: Path) -> Iterator[SpawnStore]:
    """``spawn(data_dir=None, *, settings=None, extra_args=()) -> StoreProcess``.

    Every process it started is killed by PID when the test ends.
    """
    with store_process_factory(tmp_path) as spawn:
        yield spawn
