"""Locate, install and start the three servers of the peer benchmark on loopback.

Where the peers come from: Debian's packages ``nats-server`` (2.9.10 in bookworm)
and ``redis-server`` (7.0.x in bookworm). :func:`ensure_binaries` finds them on
``PATH``; when one is missing and we are root with ``apt-get`` (as on the project's
machines and in CI) it runs ``apt-get update`` once and ``apt-get install -y
nats-server redis-server``, bounded in time; otherwise it fails loudly with that
command. ``POPFLEET_BENCH_NO_INSTALL=1`` forbids the install. Installing does not
start the packaged services (no init system here); we never use them anyway.

How each server runs (every one on a fresh temp dir and a free 127.0.0.1 port,
started and stopped by PID through :mod:`bench.peers.procs`):

* NATS: ``nats-server -a 127.0.0.1 -p PORT -js -sd DIR`` -- JetStream with file
  storage (streams are created file-backed by the adapter); no monitoring port,
  no cluster port. Ready when the INFO line it greets with says ``"jetstream":true``.
* Redis: ``redis-server --bind 127.0.0.1 --port PORT --dir DIR --appendonly yes
  --appendfsync everysec --save ""`` (AOF fsync once a second, no RDB snapshots).
  Ready when ``PING`` answers ``+PONG``.
* popfleet: ``popbroker all --data-dir DIR --listen 127.0.0.1:PORT --port-file F``
  (async flush, the default), with its topics and groups seeded into the data dir
  through the store API before it starts (the admin API is not built yet). Ready
  when the port file appears.
* popfleet in the deployment shape (:func:`start_popfleet_roles`): the three role
  processes of a broker pod, ``popbroker store --socket S``, ``popbroker popack
  --store-socket S --data-dir DIR --listen 127.0.0.1:PORT`` (reads from the store's
  files, as in a pod) and ``popbroker revive --store-socket S --data-dir DIR``, meeting on a Unix
  socket in the work dir, seeded the same way. The store is ready when its socket
  appears, popack when its port file does; revive has no readiness signal in a pod
  either, so it only has to be running.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.peers import procs
from tools import gobuild

PACKAGES = ("nats-server", "redis-server")
ROOT = Path(__file__).resolve().parents[2]
# Installs without starting redis-server's (or any) service from the package scripts.
INSTALL_COMMAND = f"{ROOT / 'scripts' / 'apt-install.sh'} nats-server redis-server"
APT_TIMEOUT_S = 600.0
FRONT_SOCKET = "popack.sock"  # popack's v2 endpoint behind popfront, in the work dir


class PeerUnavailable(RuntimeError):
    """A peer server binary is missing and could not be installed."""


@dataclass(frozen=True, slots=True)
class Binaries:
    nats_server: str
    redis_server: str

    def versions(self) -> dict[str, str]:
        return {
            "nats-server": _first_line([self.nats_server, "--version"]),
            "redis-server": _first_line([self.redis_server, "--version"]),
        }


def _first_line(argv: list[str]) -> str:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr) else ""


def _locate() -> dict[str, str | None]:
    return {name: shutil.which(name) or _sbin(name) for name in PACKAGES}


def _sbin(name: str) -> str | None:
    for folder in ("/usr/bin", "/usr/sbin", "/usr/local/bin"):
        candidate = Path(folder) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _apt_install(missing: Sequence[str]) -> None:
    argv = [str(ROOT / "scripts" / "apt-install.sh"), *PACKAGES]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=APT_TIMEOUT_S, check=False)
    if out.returncode != 0:
        raise PeerUnavailable(
            f"{' '.join(argv)} failed ({out.returncode}) while installing {list(missing)}:\n"
            f"{out.stderr[-2000:]}\nInstall by hand: {INSTALL_COMMAND}"
        )


def ensure_binaries(*, install: bool | None = None) -> Binaries:
    """The server binaries, installed from Debian's packages when missing (see the module doc)."""
    found = _locate()
    missing = [name for name, path in found.items() if path is None]
    if missing:
        if install is None:
            install = os.environ.get("POPFLEET_BENCH_NO_INSTALL") != "1"
        can_install = install and os.geteuid() == 0 and shutil.which("apt-get") is not None
        if not can_install:
            raise PeerUnavailable(
                f"missing peer servers {missing}; install them with: {INSTALL_COMMAND}"
            )
        _apt_install(missing)
        found = _locate()
        missing = [name for name, path in found.items() if path is None]
        if missing:
            raise PeerUnavailable(f"{missing} still missing after: {INSTALL_COMMAND}")
    nats, redis = found["nats-server"], found["redis-server"]
    assert nats is not None
    assert redis is not None
    return Binaries(nats_server=nats, redis_server=redis)


# -- NATS ------------------------------------------------------------------------------------


def _nats_ready(port: int) -> bool:
    info = procs.tcp_exchange(port, b"")
    return info.startswith(b"INFO ") and b'"jetstream":true' in info


def start_nats(binaries: Binaries, work_dir: Path) -> procs.ServerProcess:
    port = procs.free_port()
    store_dir = work_dir / "jetstream"
    argv = [
        binaries.nats_server,
        "-a", procs.HOST,
        "-p", str(port),
        "-js",
        "-sd", str(store_dir),
    ]  # fmt: skip
    return procs.start("nats", argv, work_dir=work_dir, port=port, ready=_nats_ready)


# -- Redis -----------------------------------------------------------------------------------


def _redis_ready(port: int) -> bool:
    return procs.tcp_exchange(port, b"PING\r\n").startswith(b"+PONG")


def start_redis(binaries: Binaries, work_dir: Path) -> procs.ServerProcess:
    port = procs.free_port()
    data_dir = work_dir / "redis"
    data_dir.mkdir(parents=True, exist_ok=True)
    argv = [
        binaries.redis_server,
        "--bind", procs.HOST,
        "--port", str(port),
        "--dir", str(data_dir),
        "--appendonly", "yes",
        "--appendfsync", "everysec",
        "--save", "",
        "--daemonize", "no",
        "--protected-mode", "yes",
        "--logfile", "",
    ]  # fmt: skip
    return procs.start("redis", argv, work_dir=work_dir, port=port, ready=_redis_ready)


# -- popfleet --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PopfleetTopic:
    name: str
    queues: int = 4


def popbroker_argv() -> list[str]:
    """``popbroker`` next to this interpreter (the venv's entry point), else ``-m``."""
    script = Path(sys.executable).parent / "popbroker"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "popbroker.cli"]


def popfleet_available() -> str | None:
    """None when ``popbroker all`` can be run here, else why not."""
    try:
        out = subprocess.run(
            [*popbroker_argv(), "all", "--help"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"popbroker not runnable: {exc!r}"
    if out.returncode != 0 or "--listen" not in out.stdout:
        return f"popbroker all not available: {(out.stderr or out.stdout)[-300:]}"
    return None


async def _seed_popfleet(
    data_dir: Path, topics: Sequence[PopfleetTopic], groups: Sequence[str]
) -> None:
    from popbroker.store.api import GroupConfig, TopicConfig  # noqa: PLC0415 - popfleet only
    from popbroker.store.local import LocalStore  # noqa: PLC0415
    from popbroker.store.settings import StoreSettings  # noqa: PLC0415

    store = LocalStore.open(data_dir, StoreSettings())
    try:
        for topic in topics:
            await store.put_topic(
                TopicConfig(topic.name, read_queue_nums=topic.queues, write_queue_nums=topic.queues)
            )
        for group in groups:
            await store.put_group(GroupConfig(group))
    finally:
        await store.close()


def _popbroker_env() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1"}


def start_popfleet(
    work_dir: Path,
    *,
    topics: Sequence[PopfleetTopic],
    groups: Sequence[str],
    front_port: int | None = None,
) -> procs.ServerProcess:
    """``popbroker all``; with ``front_port``, behind popfront (:func:`start_front`) on it."""
    data_dir = work_dir / "data"
    asyncio.run(_seed_popfleet(data_dir, topics, groups))
    port = procs.free_port()
    port_file = work_dir / "port"
    argv = [
        *popbroker_argv(),
        "all",
        "--data-dir", str(data_dir),
        *_endpoint_flags(work_dir, port, front_port),
        "--port-file", str(port_file),
    ]  # fmt: skip
    return procs.start(
        "popfleet",
        argv,
        work_dir=work_dir,
        port=port,
        ready=lambda _port: port_file.exists(),
        ready_timeout_s=30.0,
        env=_popbroker_env(),
    )


def start_popfleet_roles(
    work_dir: Path,
    *,
    topics: Sequence[PopfleetTopic],
    groups: Sequence[str],
    front_port: int | None = None,
    store_args: Sequence[str] = (),
) -> procs.ServerSet:
    """popfleet as a broker pod runs it: store, popack and revive processes (module doc);
    with ``front_port``, behind popfront (:func:`start_front`) on it. ``store_args`` go to
    the store role (a replica's flags)."""
    data_dir = work_dir / "data"
    asyncio.run(_seed_popfleet(data_dir, topics, groups))
    socket_path = work_dir / "store.sock"
    port_file = work_dir / "port"
    port = procs.free_port()
    started: list[procs.ServerProcess] = []
    roles: list[tuple[str, list[str], Callable[[int], bool], int]] = [
        (
            "store",
            ["store", "--data-dir", str(data_dir), "--socket", str(socket_path), *store_args],
            lambda _port: socket_path.exists(),
            0,
        ),
        (
            "popack",
            ["popack", "--store-socket", str(socket_path), "--data-dir", str(data_dir),
             *_endpoint_flags(work_dir, port, front_port), "--port-file", str(port_file)],
            lambda _port: port_file.exists(),
            port,
        ),
        ("revive", ["revive", "--store-socket", str(socket_path), "--data-dir", str(data_dir)],
         lambda _port: True, 0),
    ]  # fmt: skip
    try:
        for name, args, ready, role_port in roles:
            started.append(
                procs.start(
                    f"popfleet-{name}",
                    [*popbroker_argv(), *args],
                    work_dir=work_dir,
                    port=role_port,
                    ready=ready,
                    ready_timeout_s=30.0,
                    env=_popbroker_env(),
                )
            )
    except BaseException:
        for server in reversed(started):
            server.stop()
        raise
    return procs.ServerSet(
        name="popfleet-roles", endpoint=f"{procs.HOST}:{port}", processes=started
    )


def _endpoint_flags(work_dir: Path, port: int, front_port: int | None) -> list[str]:
    """The v2 endpoint on ``port``, or on a Unix socket for popfront on ``front_port``."""
    if front_port is None:
        return ["--listen", f"{procs.HOST}:{port}"]
    socket_path = work_dir / FRONT_SOCKET
    return ["--listen", f"unix:{socket_path}", "--advertise", f"{procs.HOST}:{front_port}"]


def start_front(
    binary: Path, work_dir: Path, *, port: int, frames: bool = True
) -> procs.ServerProcess:
    """The ``popfront`` front end on ``port``, forwarding to the endpoint's Unix socket
    in ``work_dir`` (started with ``front_port=port``); ``frames`` False: no framed calls."""
    port_file = work_dir / "front-port"
    argv = gobuild.front_argv(
        binary,
        listen=f"{procs.HOST}:{port}",
        socket_path=work_dir / FRONT_SOCKET,
        port_file=port_file,
        frames=frames,
    )
    return procs.start(
        "popfront",
        argv,
        work_dir=work_dir,
        port=port,
        ready=lambda _port: port_file.exists(),
        ready_timeout_s=15.0,
    )
