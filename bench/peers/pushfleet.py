"""Controller of :mod:`bench.peers.pushworker` processes, and a raw ``QueryAssignment``.

Purpose: start N official PushConsumers of one group in worker processes, learn
their client ids, collect what each consumed (from which queue, when), hang or
stop one, and ask the broker what it assigns to a client id — the same
``QueryAssignment`` the client sends, with that client's ``x-mq-client-id``.

Invariants:

  * every worker is started with its PID recorded and stopped by that PID:
    ``stop`` on its stdin, then SIGKILL after a deadline; nothing is found by
    name;
  * a worker's stdout is read by a thread of its own into
    :attr:`PushFleet.events` (under a lock), so a chatty worker never blocks;
  * every wait is bounded by a deadline and polls a condition.

Callers: tests/integration/broker/test_consume_mode_switch.py,
tests/integration/broker/test_hung_consumer.py, :mod:`bench.pull_vs_pop`.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from rocketmq.v5.util.misc import Misc

Misc._Misc__LOCAL_IP = "127.0.0.1"

import grpc  # noqa: E402 - after the local-IP probe is seeded
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
POLL_S = 0.05
RPC_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Consumed:
    """One message a worker processed successfully."""

    name: str
    queue: int
    retry: bool
    attempt: int
    body: str
    t: float


@dataclass
class _Worker:
    name: str
    proc: subprocess.Popen[bytes]
    client_id: str = ""
    hanging: bool = False
    hung: list[str] = field(default_factory=list)


class PushFleet:
    """N PushConsumer workers of one group on one topic (see the module docstring)."""

    def __init__(
        self,
        *,
        endpoint: str,
        group: str,
        topic: str,
        work_dir: Path,
        names: Sequence[str],
        processing_ms: float = 0.0,
        threads: int = 1,
        max_cache: int = 1024,
    ) -> None:
        self.endpoint = endpoint
        self.group = group
        self.topic = topic
        self._work_dir = work_dir
        self._names = list(names)
        self._worker_args = [
            "--processing-ms", str(processing_ms),
            "--threads", str(threads),
            "--max-cache", str(max_cache),
        ]  # fmt: skip
        self._lock = threading.Lock()
        self._workers: dict[str, _Worker] = {}
        self._consumed: list[Consumed] = []
        self._readers: list[threading.Thread] = []

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> PushFleet:
        """Start every worker at once; return when each reported its client id."""
        self._work_dir.mkdir(parents=True, exist_ok=True)
        try:
            for name in self._names:
                self._spawn(name)
            wait_until(
                lambda: all(w.client_id for w in self._workers.values()),
                what="every push consumer started",
                timeout_s=START_TIMEOUT_S,
                check=self._check_alive,
            )
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, name: str) -> None:
        log = (self._work_dir / f"{name}.log").open("ab")
        command = [
            sys.executable, "-m", "bench.peers.pushworker",
            "--endpoint", self.endpoint,
            "--group", self.group,
            "--topic", self.topic,
            "--name", name,
            *self._worker_args,
        ]  # fmt: skip
        proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)},
        )
        log.close()
        self._workers[name] = _Worker(name, proc)
        assert proc.stdout is not None
        reader = threading.Thread(target=self._read, args=(name, proc.stdout), daemon=True)
        reader.start()
        self._readers.append(reader)

    def _read(self, name: str, stream: IO[bytes]) -> None:
        for raw in stream:
            try:
                event = json.loads(raw)
            except ValueError:
                continue  # not ours (a library printing to stdout)
            with self._lock:
                self._record(name, event)

    def _record(self, name: str, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "started":
            self._workers[name].client_id = str(event["client_id"])
        elif kind == "consumed":
            self._consumed.append(
                Consumed(
                    name,
                    int(event["queue"]),
                    bool(event["retry"]),
                    int(event["attempt"]),
                    str(event["body"]),
                    float(event["t"]),
                )
            )
        elif kind == "hanging":
            self._workers[name].hanging = True
        elif kind == "hung":
            self._workers[name].hung.append(str(event["body"]))

    def _check_alive(self) -> None:
        for worker in self._workers.values():
            code = worker.proc.poll()
            if code is not None:
                log = (self._work_dir / f"{worker.name}.log").read_text(errors="replace")
                raise RuntimeError(f"push worker {worker.name} exited with {code}:\n{log[-3000:]}")

    def _command(self, name: str, command: str) -> None:
        stdin = self._workers[name].proc.stdin
        assert stdin is not None
        stdin.write(f"{command}\n".encode())
        stdin.flush()

    def hang(self, name: str) -> None:
        """From now on ``name``'s listener never returns (it never acks again)."""
        self._command(name, "hang")
        wait_until(
            lambda: self._hanging(name),
            what=f"{name} hanging",
            timeout_s=START_TIMEOUT_S,
            check=self._check_alive,
        )

    def _hanging(self, name: str) -> bool:
        with self._lock:
            return self._workers[name].hanging

    def stop(self) -> None:
        """Ask every worker to stop; SIGKILL (by PID) whatever outlives the deadline."""
        for worker in self._workers.values():
            if worker.proc.poll() is None:
                with contextlib.suppress(OSError):  # already gone: its pipe is closed
                    self._command(worker.name, "stop")
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for worker in self._workers.values():
            try:
                worker.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.proc.kill()
                worker.proc.wait(timeout=STOP_TIMEOUT_S)
        for reader in self._readers:
            reader.join(timeout=STOP_TIMEOUT_S)
        for worker in self._workers.values():
            for stream in (worker.proc.stdin, worker.proc.stdout):
                if stream is not None:
                    stream.close()

    def __enter__(self) -> PushFleet:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- observations --------------------------------------------------------------------------

    @property
    def names(self) -> list[str]:
        return list(self._names)

    def client_id(self, name: str) -> str:
        return self._workers[name].client_id

    def assignments(self) -> dict[str, list[int]]:
        """What the broker assigns to each consumer's client id right now."""
        return {
            name: query_assignment(
                self.endpoint, topic=self.topic, group=self.group, client_id=self.client_id(name)
            )
            for name in self._names
        }

    def consumed(self) -> list[Consumed]:
        """Everything processed so far, in arrival order at the controller."""
        with self._lock:
            return list(self._consumed)

    def hung_bodies(self, name: str) -> list[str]:
        """Bodies that reached ``name``'s hung listener."""
        with self._lock:
            return list(self._workers[name].hung)

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted(self._work_dir.glob("*.log"))
        )


def wait_until(
    predicate: Callable[[], bool],
    *,
    what: str,
    timeout_s: float,
    check: Callable[[], None] = lambda: None,
    state: Callable[[], object] = lambda: "",
) -> None:
    """Poll ``predicate`` until true; TimeoutError (with ``state()``) after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        check()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s:.1f} s {state()}")
        time.sleep(POLL_S)


def query_assignment(endpoint: str, *, topic: str, group: str, client_id: str) -> list[int]:
    """The queue ids the broker at ``endpoint`` assigns to ``client_id`` (-1: every queue)."""
    host, port = endpoint.rsplit(":", 1)
    metadata = (
        ("x-mq-client-id", client_id),
        ("x-mq-language", "PYTHON"),
        ("x-mq-protocol", "GRPC_V2"),
        ("x-mq-request-id", str(uuid.uuid4())),
    )
    request = service_pb2.QueryAssignmentRequest(
        topic=definition_pb2.Resource(name=topic),
        group=definition_pb2.Resource(name=group),
        endpoints=definition_pb2.Endpoints(
            scheme=definition_pb2.IPv4,
            addresses=[definition_pb2.Address(host=host, port=int(port))],
        ),
    )
    with grpc.insecure_channel(endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        reply = stub.QueryAssignment(request, metadata=metadata, timeout=RPC_TIMEOUT_S)
    if reply.status.code != definition_pb2.OK:
        raise RuntimeError(f"QueryAssignment: {reply.status.code} {reply.status.message}")
    return sorted(a.message_queue.id for a in reply.assignments)
