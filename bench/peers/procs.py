"""A server process started by the bench: its PID recorded, stopped by that PID.

Invariants:

* every process is started by :func:`start` in a new session (its own process
  group), with stdout and stderr in a log file of its work dir;
* readiness is observed by a probe (a TCP exchange on 127.0.0.1), never slept for,
  and bounded by ``ready_timeout_s``; a process that exits early fails the start
  with the tail of its log;
* :meth:`ServerProcess.stop` sends SIGTERM to the recorded PID, then SIGKILL after
  ``stop_timeout_s``; children the server forked (Redis' AOF rewrite) are recorded
  before the stop and signalled by their own PIDs; nothing is found by name.

A server made of several processes (popfleet's three roles, RocketMQ's name
server and proxy) is a :class:`ServerSet`: stopped in the reverse order of its
start, its CPU read over all of its processes.

Callers: :mod:`bench.peers.servers`, :mod:`bench.peers.rocketmq`, the smoke tests
in ``tests/integration/bench``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HOST = "127.0.0.1"
POLL_S = 0.02


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (Linux ``/proc/<pid>/task/*/children``)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found.extend(int(p) for p in (task / "children").read_text().split())
    return found


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, breadth first (bounded: at most 1000)."""
    out: list[int] = []
    frontier = [pid]
    while frontier and len(out) < 1000:
        nxt: list[int] = []
        for parent in frontier:
            nxt.extend(children(parent))
        out.extend(nxt)
        frontier = nxt
    return out


def tcp_exchange(port: int, send: bytes, *, timeout_s: float = 0.5) -> bytes:
    """Connect to 127.0.0.1:``port``, send ``send`` (may be empty), return the first line."""
    with socket.create_connection((HOST, port), timeout=timeout_s) as sock:
        if send:
            sock.sendall(send)
        data = b""
        while b"\n" not in data and len(data) < 65536:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
        return data


@dataclass
class ServerProcess:
    """One running server; ``pids`` holds every PID we may have to stop or check."""

    name: str
    argv: list[str]
    work_dir: Path
    port: int
    proc: subprocess.Popen[bytes]
    pids: list[int] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def endpoint(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.work_dir / f"{self.name}.log"

    def log_tail(self, limit: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-limit:]
        except OSError:
            return ""

    def stop(self, *, stop_timeout_s: float = 10.0) -> list[int]:
        """SIGTERM, then SIGKILL past the deadline; returns every PID that was signalled."""
        if self.proc.poll() is None:
            self.pids.extend(p for p in descendants(self.proc.pid) if p not in self.pids)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=stop_timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=stop_timeout_s)
        for pid in self.pids:
            if pid != self.proc.pid and pid_alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + stop_timeout_s
        while any(pid_alive(p) for p in self.pids) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        return list(self.pids)

    def alive_pids(self) -> list[int]:
        return [p for p in self.pids if pid_alive(p)]


def start(
    name: str,
    argv: Sequence[str],
    *,
    work_dir: Path,
    port: int,
    ready: Callable[[int], bool],
    ready_timeout_s: float = 15.0,
    env: dict[str, str] | None = None,
) -> ServerProcess:
    """Start ``argv``, wait until ``ready(port)`` is true; stop it again on any failure."""
    work_dir.mkdir(parents=True, exist_ok=True)
    with (work_dir / f"{name}.log").open("wb") as log:
        proc = subprocess.Popen(
            list(argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=work_dir,
            env=env,
            start_new_session=True,
        )
    server = ServerProcess(
        name=name, argv=list(argv), work_dir=work_dir, port=port, proc=proc, pids=[proc.pid]
    )
    try:
        _wait_ready(server, ready, ready_timeout_s)
    except BaseException:
        server.stop()
        raise
    return server


def _wait_ready(server: ServerProcess, ready: Callable[[int], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if server.proc.poll() is not None:
            raise RuntimeError(
                f"{server.name} exited with {server.proc.returncode} before it was ready:\n"
                f"{server.log_tail()}"
            )
        try:
            if ready(server.port):
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{server.name} not ready within {timeout_s} s:\n{server.log_tail()}"
            )
        time.sleep(POLL_S * 5)


@dataclass
class ServerSet:
    """One system under test: its processes in start order and its client endpoint.

    ``netns_pid`` names a process whose network namespace the clients must enter
    (RocketMQ runs in a private one; see :mod:`bench.peers.rocketmq`), else None.
    """

    name: str
    endpoint: str
    processes: list[ServerProcess]
    netns_pid: int | None = None

    @classmethod
    def of(cls, server: ServerProcess) -> ServerSet:
        return cls(name=server.name, endpoint=server.endpoint, processes=[server])

    def root_pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def stop(self, *, stop_timeout_s: float = 10.0) -> list[int]:
        signalled: list[int] = []
        for server in reversed(self.processes):
            signalled.extend(server.stop(stop_timeout_s=stop_timeout_s))
        return signalled

    def alive_pids(self) -> list[int]:
        return [p for server in self.processes for p in server.alive_pids()]

    def log_tail(self, limit: int = 3000) -> str:
        return "\n".join(f"-- {s.name}:\n{s.log_tail(limit)}" for s in self.processes)
