"""A replicated broker set in processes, shaped as on Kubernetes (issue 18).

Each "pod" is the four processes of a broker pod on loopback: ``popbroker store`` as a
replica (its Lease on the testbed's kube-apiserver, ``--leader-file``), popack and revive
on its socket, and popfront with the access port and the leader port (``-leader-listen``,
open only while its store leads). :class:`SetService` stands in for the Service per broker
set that selects the leader's pod: each connection goes to the first pod whose leader port
accepts it, as kube-proxy sends it to the one endpoint the selector leaves. Routes and the
Lease name that service's address (``--advertise``, ``--client-endpoint``), so the
official client reaches the leader through it and never dials a pod.

Every process is started with its PID recorded and ended by that PID.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from popbroker.store.api import GroupConfig, TopicConfig
from popfleet_testbed import controlplane
from tests.integration.broker.harness import (
    START_TIMEOUT_S,
    STOP_TIMEOUT_S,
    _seed,
    _store_ready,
    _wait_for,
    stop_processes,
    store_settings,
)
from tools import gobuild

SET = "broker-0"
CLUSTER = "c1"
TIMINGS = {  # the replicas' Lease and in-sync timings: short, so a failover takes seconds
    "--lease-ms": "3000",
    "--renew-deadline-ms": "2000",
    "--retry-ms": "500",
    "--max-lag-ms": "1500",
    "--ack-timeout-s": "5",
}


@dataclass
class Pod:
    """One broker pod's processes."""

    name: str
    work_dir: Path
    leader_port: int
    replication_port: int
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def leader_file(self) -> Path:
        return self.work_dir / "leading"

    def spawn(self, role: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = (self.work_dir / f"{role}.log").open("ab")
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
        log.close()
        self.procs[role] = proc
        return proc

    def kill(self) -> None:
        """The pod is lost: SIGKILL every process at once, files left as they are."""
        for proc in self.procs.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
        for proc in self.procs.values():
            proc.wait(timeout=STOP_TIMEOUT_S)
        self.procs.clear()

    def stop(self) -> None:
        stop_processes(reversed(list(self.procs.values())))
        self.procs.clear()

    def logs(self) -> str:
        return "\n".join(
            f"--- {self.name}/{p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted(self.work_dir.glob("*.log"))
        )


def _python(*args: str) -> list[str]:
    return [sys.executable, "-m", "popbroker.cli", *args]


def start_pod(
    pod: Pod,
    *,
    service: str,
    peers: str,
    namespace: str,
    kubeconfig: Path,
    token_file: Path,
    topics: Sequence[TopicConfig],
    groups: Sequence[GroupConfig],
) -> None:
    """Seed the pod's store with the config, then start its four processes."""
    data_dir = pod.work_dir / "data"
    asyncio.run(_seed(data_dir, topics, groups))
    store_socket, popack_socket = pod.work_dir / "store.sock", pod.work_dir / "popack.sock"
    settings = store_settings()
    store = pod.spawn(
        "store",
        _python(
            "store", "--data-dir", str(data_dir), "--socket", str(store_socket),
            "--segment-bytes", str(settings.segment_bytes),
            "--cluster", CLUSTER, "--broker-name", SET,
            "--replica-name", pod.name, "--replica-peers", peers,
            "--replication-listen", f"127.0.0.1:{pod.replication_port}",
            "--lease-namespace", namespace, "--lease-name", SET,
            "--replication-token-file", str(token_file), "--kubeconfig", str(kubeconfig),
            "--min-in-sync-replicas", "2", *(x for kv in TIMINGS.items() for x in kv),
            "--client-endpoint", service, "--leader-file", str(pod.leader_file),
        ),
    )  # fmt: skip
    asyncio.run(_store_ready(store_socket, store))
    front_port_file = pod.work_dir / "front-port"
    pod.spawn(
        "popfront",
        [
            *gobuild.front_argv(
                gobuild.ensure_built(gobuild.FRONT),
                listen="127.0.0.1:0",  # the access port (unused here: the service is the way in)
                socket_path=popack_socket,
                port_file=front_port_file,
            ),
            "-leader-listen", f"127.0.0.1:{pod.leader_port}",
            "-leader-file", str(pod.leader_file),
        ],
    )  # fmt: skip
    port_file = pod.work_dir / "port"
    pod.spawn(
        "popack",
        _python(
            "popack", "--store-socket", str(store_socket), "--data-dir", str(data_dir),
            "--listen", f"unix:{popack_socket}", "--advertise", service,
            "--port-file", str(port_file),
        ),
    )  # fmt: skip
    pod.spawn(
        "revive",
        _python("revive", "--store-socket", str(store_socket), "--data-dir", str(data_dir)),
    )
    procs = list(pod.procs.values())
    _wait_for(front_port_file.exists, what="popfront", timeout_s=START_TIMEOUT_S, procs=procs)
    _wait_for(port_file.exists, what="popack", timeout_s=START_TIMEOUT_S, procs=procs)


class SetService:
    """The broker set's Service (module docstring): ``127.0.0.1:port``, each connection
    piped to the first of ``backends`` that accepts it, or closed when none does."""

    def __init__(self, backends: Sequence[int]) -> None:
        self.port = controlplane.free_port()
        self._backends = list(backends)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="set-service", daemon=True)
        self._server: asyncio.Server | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> SetService:
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT_S):
            raise TimeoutError("the set's service did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(STOP_TIMEOUT_S)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", self.port)
        )
        self._ready.set()
        self._loop.run_forever()
        self._server.close()
        for task in asyncio.all_tasks(self._loop):
            task.cancel()
        self._loop.run_until_complete(asyncio.sleep(0))
        self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        for port in self._backends:
            with contextlib.suppress(OSError):
                upstream = await asyncio.open_connection("127.0.0.1", port)
                break
        if upstream is None:  # no pod leads now: the client reconnects later
            writer.close()
            return
        up_reader, up_writer = upstream
        await asyncio.gather(
            _pipe(reader, up_writer), _pipe(up_reader, writer), return_exceptions=True
        )


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


@contextlib.contextmanager
def broker_set(
    work_dir: Path,
    *,
    namespace: str,
    kubeconfig: Path,
    topics: Sequence[TopicConfig],
    groups: Sequence[GroupConfig],
    names: Sequence[str] = ("a", "b", "c"),
) -> Iterator[tuple[dict[str, Pod], SetService]]:
    """Three pods of one broker set behind its service; every process stopped at the end."""
    token = work_dir / "token"
    work_dir.mkdir(parents=True, exist_ok=True)
    token.write_text("set-secret\n")
    # As in a cluster, where peers are DNS names only resolvable there: followers dial the
    # address the leader publishes on the Lease (its --replication-listen), never these
    # (free ports nothing listens on: a follower dialling them would never catch up).
    peers = ",".join(f"{n}=127.0.0.1:{controlplane.free_port()}" for n in names)
    pods = {
        n: Pod(
            n,
            work_dir / n,
            leader_port=controlplane.free_port(),
            replication_port=controlplane.free_port(),
        )
        for n in names
    }
    with SetService([p.leader_port for p in pods.values()]) as service:
        try:
            for pod in pods.values():
                pod.work_dir.mkdir(parents=True)
                start_pod(
                    pod, service=service.address, peers=peers, namespace=namespace,
                    kubeconfig=kubeconfig, token_file=token, topics=topics, groups=groups,
                )  # fmt: skip
            yield pods, service
        finally:
            for pod in pods.values():
                pod.stop()
