"""Start and stop the testbed's long-running processes, identified by recorded PIDs.

Why: the testbed must tear down "leaving no process behind" without ever killing by name
(`pkill -f etcd` would hit other people's processes). Every process we start is written to a
pid file as ``<pid> <start time>``; the start time (field 22 of ``/proc/<pid>/stat``, clock
ticks since boot) guards against PID reuse: a recorded PID whose start time no longer matches
is someone else's process and is left alone.

Each process is started in its own session (``start_new_session=True``) so that it survives
the shell that ran ``make testbed-up`` and so that its whole process group can be signalled.

Callers: ``controlplane`` (etcd, kube-apiserver, ...) and ``kubelet`` (pod containers).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# Popen objects of children still running, by PID: kept so that they are never garbage
# collected while running (Popen.__del__ warns, and warnings are errors in tests) and so that
# ``stop`` can reap them instead of leaving zombies in a long-lived parent such as pytest.
_children: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True, slots=True)
class Recorded:
    """A process we started: its PID and the kernel's start time for that PID."""

    pid: int
    start_ticks: int


def start_ticks(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot, or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])


def is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] in "ZX"


def alive(rec: Recorded) -> bool:
    """True while the recorded process (not a later reuse of its PID) still runs."""
    return start_ticks(rec.pid) == rec.start_ticks and not is_zombie(rec.pid)


def spawn(
    argv: Sequence[str],
    *,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    pid_file: Path | None = None,
) -> tuple[subprocess.Popen[bytes], Recorded]:
    """Start ``argv`` in a new session, stdout+stderr appended to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )
    _children[proc.pid] = proc
    ticks = start_ticks(proc.pid)
    rec = Recorded(pid=proc.pid, start_ticks=ticks if ticks is not None else -1)
    if pid_file is not None:
        write_pid_file(pid_file, rec)
    return proc, rec


def write_pid_file(path: Path, rec: Recorded) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{rec.pid} {rec.start_ticks}\n")
    tmp.replace(path)


def read_pid_file(path: Path) -> Recorded | None:
    try:
        pid_s, ticks_s = path.read_text().split()
    except (OSError, ValueError):
        return None
    return Recorded(pid=int(pid_s), start_ticks=int(ticks_s))


def signal_group(rec: Recorded, sig: signal.Signals) -> None:
    """Signal the recorded process's group (it leads one: see ``spawn``), if still ours."""
    if not alive(rec):
        return
    try:
        os.killpg(rec.pid, sig)
    except ProcessLookupError:
        return
    except PermissionError:
        os.kill(rec.pid, sig)


def stop(rec: Recorded, *, grace_s: float) -> None:
    """SIGTERM the process group, SIGKILL it after ``grace_s``; return once it is gone."""
    signal_group(rec, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while alive(rec) and time.monotonic() < deadline:
        _reap(rec.pid)
        time.sleep(0.05)
    if alive(rec):
        signal_group(rec, signal.SIGKILL)
        hard_deadline = time.monotonic() + 10.0
        while alive(rec) and time.monotonic() < hard_deadline:
            _reap(rec.pid)
            time.sleep(0.05)
    proc = _children.pop(rec.pid, None)
    if proc is not None:
        # A multi-threaded leader shows as a zombie before the whole thread group is
        # reapable, so wait (bounded) instead of polling once.
        try:
            proc.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            _children[rec.pid] = proc
    else:
        _reap(rec.pid)


def kill_group_remnants(pid: int) -> None:
    """SIGKILL what is left of the process group ``pid`` just after its leader was reaped.

    Safe against PID reuse in practice: the kernel does not hand out a PID that is still in use
    as a process group ID, so while remnants exist the group is ours.
    """
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return


def forget(pid: int) -> None:
    """The caller has collected ``pid``'s exit status itself (``Popen.poll``)."""
    _children.pop(pid, None)


def _reap(pid: int) -> None:
    """Collect the exit status when ``pid`` is our child (no-op otherwise)."""
    proc = _children.get(pid)
    if proc is not None:
        if proc.poll() is not None:
            del _children[pid]
        return
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return
