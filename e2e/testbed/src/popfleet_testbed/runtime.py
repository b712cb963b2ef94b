"""The process "container runtime": one local process per container run, with restarts.

Why: the kubelet loop (``kubelet``) decides *what* should run; this module holds the per-pod
and per-container state and does the process work: start a container's argv with its env,
cwd and log file; notice its exit; apply the restart policy with back-off; drive its probes;
kill it on liveness failure or pod deletion.

Rules (as in the kubelet, simplified):

1. Init containers run one at a time, in order; a failing one is retried unless
   ``restartPolicy: Never`` (then the pod fails). Regular containers start together after.
2. On exit: ``Always`` restarts; ``OnFailure`` restarts on a non-zero code; ``Never`` does not.
   Restarts wait a back-off doubling from 1 s to 30 s (reset after 60 s of running); the
   container shows ``waiting: CrashLoopBackOff`` meanwhile and ``restartCount`` counts them.
3. Exit codes: a signal ``N`` is reported as ``128 + N`` (SIGTERM → 143), reason ``Error``;
   0 is ``Completed``.
4. A startup or liveness probe reaching its failure threshold kills the container (SIGTERM,
   SIGKILL after the grace period); rule 2 then decides about the restart.
5. Logs: ``<pod dir>/logs/<container>/<restartCount>.log`` (stdout and stderr together).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from popfleet_testbed import probes, processes, volumes

Obj = dict[str, Any]

BACKOFF_INITIAL_S = 1.0
BACKOFF_MAX_S = 30.0
BACKOFF_RESET_AFTER_S = 60.0
PROBE_KINDS = ("startupProbe", "livenessProbe", "readinessProbe")


def now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass(slots=True)
class ContainerRun:
    spec: Obj
    init: bool
    pod_dir: Path
    proc: subprocess.Popen[bytes] | None = None
    rec: processes.Recorded | None = None
    started_mono: float = 0.0
    restart_count: int = 0
    runs: int = 0
    state: Obj = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: Obj = field(default_factory=dict)
    next_start_mono: float = 0.0
    backoff_s: float = 0.0
    done: bool = False
    kill_deadline_mono: float | None = None
    probe_states: dict[str, probes.ProbeState] = field(default_factory=dict)
    pending: dict[str, Future[tuple[bool, str]]] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path = Path("/")
    rewrite: Callable[[str], str] = str

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def pid_file(self) -> Path:
        return self.pod_dir / "containers" / f"{self.name}.pid"

    @property
    def log_dir(self) -> Path:
        return self.pod_dir / "logs" / self.name

    @property
    def running(self) -> bool:
        return self.proc is not None

    @property
    def started(self) -> bool:
        startup = self.probe_states.get("startupProbe")
        return self.running and (startup is None or startup.passed)

    @property
    def ready(self) -> bool:
        if not self.started:
            return False
        readiness = self.probe_states.get("readinessProbe")
        return readiness is None or readiness.passed

    @property
    def succeeded(self) -> bool:
        return self.done and self.state.get("terminated", {}).get("exitCode") == 0

    def start(self, argv: list[str], *, env: dict[str, str], cwd: Path, now_mono: float) -> None:
        """Spawn the process (the caller has built argv/env/cwd; see ``kubelet``)."""
        if self.runs > 0:
            self.restart_count += 1
        self.runs += 1
        self.env, self.cwd = env, cwd
        log_path = self.log_dir / f"{self.restart_count}.log"
        self.proc, self.rec = processes.spawn(
            argv, log_path=log_path, env=env, cwd=cwd, pid_file=self.pid_file
        )
        self.started_mono = now_mono
        self.state = {"running": {"startedAt": now_rfc3339()}}
        self.kill_deadline_mono = None
        self.probe_states = {
            kind: probes.ProbeState(spec=self.spec[kind], started_mono=now_mono)
            for kind in PROBE_KINDS
            if self.spec.get(kind) and not self.init
        }
        self.pending.clear()

    def kill(self, *, grace_s: float, now_mono: float) -> None:
        """SIGTERM now; ``reap`` sends SIGKILL once ``grace_s`` has passed."""
        if self.rec is None or self.kill_deadline_mono is not None:
            return
        processes.signal_group(self.rec, signal.SIGTERM)
        self.kill_deadline_mono = now_mono + grace_s

    def reap(self, *, restart_policy: str, now_mono: float) -> bool:
        """Notice an exit and apply the restart policy; True when the state changed."""
        if self.proc is None or self.rec is None:
            return False
        if self.kill_deadline_mono is not None and now_mono >= self.kill_deadline_mono:
            processes.signal_group(self.rec, signal.SIGKILL)
        code = self.proc.poll()
        if code is None:
            return False
        processes.forget(self.rec.pid)
        # The container's process group may still hold children: take them down with it.
        processes.kill_group_remnants(self.rec.pid)
        exit_code = code if code >= 0 else 128 - code
        terminated: Obj = {
            "exitCode": exit_code,
            "reason": "Completed" if exit_code == 0 else "Error",
            "startedAt": self.state.get("running", {}).get("startedAt", now_rfc3339()),
            "finishedAt": now_rfc3339(),
            "containerID": f"testbed://{self.rec.pid}",
        }
        if code < 0:
            terminated["signal"] = -code
        self.proc, self.rec = None, None
        self.pid_file.unlink(missing_ok=True)
        self.probe_states.clear()
        ran_s = now_mono - self.started_mono
        restart = restart_policy == "Always" or (restart_policy == "OnFailure" and exit_code != 0)
        if self.init:
            restart = exit_code != 0 and restart_policy != "Never"
        if not restart:
            self.done = True
            self.state = {"terminated": terminated}
            return True
        self.last_state = {"terminated": terminated}
        if ran_s >= BACKOFF_RESET_AFTER_S:
            self.backoff_s = 0.0
        self.backoff_s = min(max(BACKOFF_INITIAL_S, self.backoff_s * 2), BACKOFF_MAX_S)
        self.next_start_mono = now_mono + self.backoff_s
        self.state = {
            "waiting": {
                "reason": "CrashLoopBackOff",
                "message": f"back-off {self.backoff_s:.0f}s restarting failed container",
            }
        }
        return True

    def run_probes(
        self, pool: ThreadPoolExecutor, *, pod_ip: str, now_mono: float, grace_s: float
    ) -> bool:
        """Fold finished attempts in, start due ones; True when readiness/started changed."""
        if self.proc is None or self.kill_deadline_mono is not None:
            return False
        before = (self.started, self.ready)
        for kind, state in self.probe_states.items():
            fut = self.pending.get(kind)
            if fut is not None and fut.done():
                ok, message = fut.result()
                del self.pending[kind]
                state.record(ok, now_mono)
                if kind in ("livenessProbe", "startupProbe") and state.failed:
                    # what a kubelet's event says before the restart
                    print(
                        f"{now_rfc3339()} kubelet: {self.pod_dir.name}/{self.name}: {kind}"
                        f" failed: {message}; the container will be restarted",
                        file=sys.stderr, flush=True,
                    )  # fmt: skip
                    self.kill(grace_s=grace_s, now_mono=now_mono)
                    return True
            gated = kind != "startupProbe" and not self.started
            if kind not in self.pending and state.due(now_mono) and not gated:
                if kind == "startupProbe" and state.passed:
                    continue
                self.pending[kind] = pool.submit(
                    probes.attempt,
                    state.spec,
                    pod_ip=pod_ip,
                    container=self.spec,
                    env=self.env,
                    cwd=self.cwd,
                    rewrite=self.rewrite,
                )
        return (self.started, self.ready) != before


@dataclass(slots=True)
class PodRun:
    uid: str
    namespace: str
    name: str
    pod: Obj
    ip: str
    pod_dir: Path
    vols: volumes.PodVolumes
    init: list[ContainerRun]
    containers: list[ContainerRun]
    start_time: str = field(default_factory=now_rfc3339)
    prepared: bool = False
    waiting_message: str = ""
    terminating: bool = False
    kill_deadline_mono: float = 0.0
    deleted: bool = False
    last_refresh_mono: float = 0.0
    last_status: Obj | None = None
    transitions: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def all_runs(self) -> list[ContainerRun]:
        return [*self.init, *self.containers]

    @property
    def restart_policy(self) -> str:
        return str(self.pod["spec"].get("restartPolicy", "Always"))

    @property
    def grace_s(self) -> float:
        return float(self.pod["spec"].get("terminationGracePeriodSeconds", 30))

    @property
    def initialized(self) -> bool:
        return all(c.succeeded for c in self.init)

    @property
    def init_failed(self) -> bool:
        return any(c.done and not c.succeeded for c in self.init)

    @property
    def any_running(self) -> bool:
        return any(c.running for c in self.all_runs)

    def phase(self) -> str:
        if self.init_failed:
            return "Failed"
        if self.containers and all(c.done for c in self.containers):
            return "Succeeded" if all(c.succeeded for c in self.containers) else "Failed"
        if self.initialized and any(c.runs > 0 for c in self.containers):
            return "Running"
        return "Pending"
