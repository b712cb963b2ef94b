"""Broker processes for the integration tests: ``popbroker all`` or three role processes.

The broker always runs in processes of its own (the official client then
talks to it over real loopback gRPC, as a user's client would). Topics and
groups are seeded into the data directory before the store opens it (the
admin API is not part of the broker yet). Every process is started with its
PID recorded and stopped by that PID: SIGTERM, then SIGKILL after a deadline.

Readiness is observed, never slept for: the endpoint's bound port appears in
``--port-file`` once it serves; the store role is ready when its Unix socket
answers ``Info``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from popbroker.store.api import GroupConfig, TopicConfig
from popbroker.store.local import LocalStore
from popbroker.store.settings import StoreSettings
from popbroker.store.wire.client import RemoteStore
from popbroker.store.wire.frames import frames_path
from popfleet_testbed import controlplane
from tools import gobuild

SEGMENT_BYTES = 8 * 1024 * 1024
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
MODES = ("all", "roles")
FRONT_MODES = ("all-front", "roles-front")  # the same, behind popfront (popbroker.grpc.front)
WITH_FRONT = MODES + FRONT_MODES
TLS_FLAGS = ("--tls-cert", "--tls-key")  # behind popfront they are the front end's


def endpoint_role(mode: str) -> str:
    """The role that serves the v2 endpoint in ``mode`` (its flags go to it)."""
    return "all" if mode.startswith("all") else "popack"


def store_settings() -> StoreSettings:
    return StoreSettings(segment_bytes=SEGMENT_BYTES, revive_queue_num=4)


async def _seed(
    data_dir: Path, topics: Sequence[TopicConfig], groups: Sequence[GroupConfig]
) -> None:
    store = LocalStore.open(data_dir, store_settings())
    try:
        for topic in topics:
            await store.put_topic(topic)
        for group in groups:
            await store.put_group(group)
    finally:
        await store.close()


def _wait_for(
    predicate: object, *, what: str, timeout_s: float, procs: Sequence[subprocess.Popen[bytes]]
) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        for proc in procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{what}: process {proc.args!r} exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not ready within {timeout_s} s")
        time.sleep(0.02)


@dataclass
class BrokerProcess:
    """A running broker (one ``all`` process, or store + popack + revive)."""

    mode: str
    work_dir: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    port: int = 0
    admin_port: int = 0  # set when started with ``admin=True`` (``all`` mode only)
    roles: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    role_args: dict[str, list[str]] = field(default_factory=dict)
    extra_args: Mapping[str, Sequence[str]] = field(default_factory=dict)  # role -> more flags
    host: str = "127.0.0.1"  # the loopback address the client endpoint listens on
    front_metrics_port: int = 0  # popfront's /metrics (front modes)

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.work_dir / "data"

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        args = [*args, *self.extra_args.get(name, ())] if name not in self.role_args else args
        log = (self.work_dir / f"{name}.log").open("ab")
        proc = subprocess.Popen(
            [sys.executable, "-m", "popbroker.cli", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        log.close()
        self.procs.append(proc)
        self.roles[name] = proc
        self.role_args[name] = args
        return proc

    def kill(self, name: str) -> None:
        """SIGKILL one role process (by its PID) and reap it."""
        proc = self.roles[name]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=STOP_TIMEOUT_S)
        self.procs.remove(proc)

    def front_metric(self, sample: str) -> float:
        """The value of one sample (name and labels, as exposed) on popfront's /metrics."""
        url = f"http://127.0.0.1:{self.front_metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as reply:
            for line in reply.read().decode().splitlines():
                if line.startswith(sample + " "):
                    return float(line.split()[-1])
        raise LookupError(f"{sample} is not on popfront's /metrics")

    @property
    def front(self) -> bool:
        """The client port is popfront's, forwarding to the endpoint's Unix socket."""
        return self.mode in FRONT_MODES

    def restart(self, name: str) -> None:
        """Start a killed role again with its arguments; the endpoint gets a new port
        (behind popfront the client port stays the front end's)."""
        port_file = self.work_dir / "port"
        if name in ("popack", "all"):
            port_file.unlink(missing_ok=True)
        self._spawn(name, self.role_args[name])
        if name in ("popack", "all"):
            _wait_for(
                port_file.exists, what="endpoint", timeout_s=START_TIMEOUT_S, procs=self.procs
            )
            if not self.front:
                self.port = int(port_file.read_text().strip())

    @classmethod
    def start(
        cls,
        work_dir: Path,
        *,
        mode: str,
        topics: Sequence[TopicConfig],
        groups: Sequence[GroupConfig],
        admin: bool = False,
        extra_args: Mapping[str, Sequence[str]] | None = None,
        host: str = "127.0.0.1",
    ) -> BrokerProcess:
        """Seed, then start; ``extra_args`` adds flags per role name (``all``, ``popack``, ...).

        ``host``: another loopback address (``127.0.0.2``...) for the client endpoint.
        """
        if admin and not mode.startswith("all"):
            raise ValueError("the admin API is served by the all role here")
        if not host.startswith("127."):
            raise ValueError(f"{host}: brokers in tests listen on loopback only")
        work_dir.mkdir(parents=True, exist_ok=True)
        broker = cls(mode=mode, work_dir=work_dir, extra_args=dict(extra_args or {}), host=host)
        asyncio.run(_seed(broker.data_dir, topics, groups))
        try:
            broker._start_processes(admin=admin)
        except BaseException:
            broker.stop()
            raise
        return broker

    def _take_tls_flags(self) -> list[str]:
        """Move the endpoint role's TLS flags to popfront (``-tls-cert``, ``-tls-key``)."""
        role = endpoint_role(self.mode)
        args = list(self.extra_args.get(role, ()))
        moved: list[str] = []
        for flag in TLS_FLAGS:
            if flag in args:
                at = args.index(flag)
                moved += [flag[1:], args[at + 1]]
                del args[at : at + 2]
        self.extra_args = {**self.extra_args, role: args}
        return moved

    def _start_front(self) -> list[str]:
        """Start popfront first (its port is what routes name); the endpoint's flags."""
        front_port_file = self.work_dir / "front-port"
        socket_path = self.work_dir / "popack.sock"
        self.front_metrics_port = controlplane.free_port()  # its listener takes no port file
        argv = gobuild.front_argv(
            gobuild.ensure_built(gobuild.FRONT),
            listen=f"{self.host}:0",
            socket_path=socket_path,
            port_file=front_port_file,
            tls=tuple(self._take_tls_flags()),
            metrics_listen=f"127.0.0.1:{self.front_metrics_port}",
        )
        log = (self.work_dir / "popfront.log").open("ab")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.procs.append(proc)
        self.roles["popfront"] = proc
        _wait_for(
            front_port_file.exists, what="popfront", timeout_s=START_TIMEOUT_S, procs=self.procs
        )
        self.port = int(front_port_file.read_text().strip())
        return ["--listen", f"unix:{socket_path}", "--advertise", f"{self.host}:{self.port}"]

    def _start_processes(self, *, admin: bool) -> None:
        port_file = self.work_dir / "port"
        admin_port_file = self.work_dir / "admin-port"
        settings = store_settings()
        listen = self._start_front() if self.front else ["--listen", f"{self.host}:0"]
        if self.mode.startswith("all"):
            admin_args = (
                ["--admin-listen", "127.0.0.1:0", "--admin-port-file", str(admin_port_file)]
                if admin
                else []
            )
            self._spawn(
                "all",
                [
                    "all",
                    "--data-dir", str(self.data_dir),
                    *listen,
                    "--port-file", str(port_file),
                    "--segment-bytes", str(settings.segment_bytes),
                    *admin_args,
                ],
            )  # fmt: skip
        else:
            socket_path = self.work_dir / "store.sock"
            store_proc = self._spawn(
                "store",
                [
                    "store",
                    "--data-dir", str(self.data_dir),
                    "--socket", str(socket_path),
                    "--segment-bytes", str(settings.segment_bytes),
                ],
            )  # fmt: skip
            asyncio.run(_store_ready(socket_path, store_proc))
            self._spawn(
                "popack",
                [
                    "popack",
                    "--store-socket", str(socket_path),
                    "--data-dir", str(self.data_dir),
                    *listen,
                    "--port-file", str(port_file),
                ],
            )  # fmt: skip
            self._spawn(
                "revive",
                ["revive", "--store-socket", str(socket_path), "--data-dir", str(self.data_dir)],
            )
        _wait_for(port_file.exists, what="endpoint", timeout_s=START_TIMEOUT_S, procs=self.procs)
        if not self.front:
            self.port = int(port_file.read_text().strip())
        else:  # popfront's hot calls go framed (popbroker.grpc.frontframes): the socket is there
            framed = frames_path(self.work_dir / "popack.sock")
            assert framed.is_socket(), f"popack serves no frames socket at {framed}"
        if admin:
            self.admin_port = int(admin_port_file.read_text().strip())

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}"
            for p in sorted(self.work_dir.glob("*.log"))
        )

    def stop(self) -> None:
        """SIGTERM every process (endpoint first), SIGKILL what outlives the deadline."""
        stop_processes(reversed(self.procs))
        self.procs.clear()


def stop_processes(procs: Iterable[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each process in turn, SIGKILL it when it outlives the deadline."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT_S)


async def _store_ready(socket_path: Path, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not socket_path.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"store exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError("store socket did not appear")
        await asyncio.sleep(0.02)
    store = RemoteStore.connect(f"unix:{socket_path}")
    try:
        await store.wait_ready(timeout_s=START_TIMEOUT_S)
    finally:
        await store.close()
