"""Server CPU per message: CPU seconds of a server's process tree from ``/proc``.

What is counted: for every live process in the tree below the server's root PIDs
(popfleet's broker processes, RocketMQ's two JVMs, nats-server, redis-server and
whatever they forked), ``utime + stime`` of ``/proc/<pid>/stat`` (all threads of
the process), plus ``cutime + cstime`` (children it has already waited for, such
as Redis' AOF rewrite), so a helper that exits between two readings is not lost:
its time moves from its own line into its parent's. Differences of two readings
of the same tree are what the harness reports; a process that exits *unwaited*
between them (nothing here does) would take its time with it.

A reading also keeps the 1-minute load average (``/proc/loadavg``), so every
phase says how busy the machine was at its start and end, and the machine's CPU
ticks and steal ticks (``/proc/stat``'s ``cpu`` line): ``steal_pct`` is the
share of the machine's CPU time that the hypervisor gave to other guests during
the phase. On a shared host that, not our load, is what makes the same build
measure ±30% apart between runs; a phase with steal above a few percent is not a
result.

Pure parts (:func:`parse_stat`, :func:`us_per_message`) take text and numbers;
:func:`read` takes the proc root as a parameter, so the tests feed it a
synthetic tree. Callers: :mod:`bench.pop_peers_loadgen`, :mod:`bench.pop_peers`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
MAX_PROCESSES = 1000  # bound on a tree walk


@dataclass(frozen=True, slots=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` that the CPU accounting needs (ticks)."""

    pid: int
    state: str
    utime: int
    stime: int
    cutime: int
    cstime: int

    @property
    def ticks(self) -> int:
        return self.utime + self.stime + self.cutime + self.cstime


def parse_stat(text: str) -> ProcStat:
    """Parse one ``/proc/<pid>/stat`` line.

    The command name (field 2) is in parentheses and may hold spaces and ``)``, so
    the fields after it are split from the *last* ``)``. Fields (1-based, proc(5)):
    3 state, 14 utime, 15 stime, 16 cutime, 17 cstime.
    """
    head, sep, tail = text.rpartition(")")
    if not sep:
        raise ValueError(f"not a /proc stat line: {text[:80]!r}")
    pid = int(head.split("(", 1)[0])
    fields = tail.split()
    if len(fields) < 15:
        raise ValueError(f"short /proc stat line for pid {pid}: {len(fields)} fields after comm")
    return ProcStat(
        pid=pid,
        state=fields[0],
        utime=int(fields[11]),
        stime=int(fields[12]),
        cutime=int(fields[13]),
        cstime=int(fields[14]),
    )


def children(pid: int, *, proc: Path = PROC) -> list[int]:
    """Direct children of ``pid`` (``/proc/<pid>/task/*/children``)."""
    found: list[int] = []
    for task in sorted((proc / str(pid) / "task").glob("*")):
        with contextlib.suppress(OSError, ValueError):
            found.extend(int(p) for p in (task / "children").read_text().split())
    return found


def tree(roots: Iterable[int], *, proc: Path = PROC) -> list[int]:
    """``roots`` and every process below them, breadth first, each once (bounded)."""
    seen: list[int] = []
    frontier = list(dict.fromkeys(roots))
    while frontier and len(seen) < MAX_PROCESSES:
        seen.extend(p for p in frontier if p not in seen)
        frontier = [c for p in frontier for c in children(p, proc=proc) if c not in seen]
    return seen


@dataclass(frozen=True, slots=True)
class Reading:
    """CPU ticks of a process tree and the 1-minute load average, at one moment."""

    ticks: int
    processes: int
    load_1m: float
    machine_ticks: int = 0  # every CPU state of every CPU (/proc/stat "cpu" line)
    steal_ticks: int = 0

    def cpu_s_since(self, earlier: Reading, *, clock_ticks: int = CLOCK_TICKS) -> float:
        return max(0, self.ticks - earlier.ticks) / clock_ticks


def read(roots: Iterable[int], *, proc: Path = PROC) -> Reading:
    """One reading of the tree below ``roots``; vanished processes count as 0."""
    ticks = 0
    processes = 0
    for pid in tree(roots, proc=proc):
        try:
            stat = parse_stat((proc / str(pid) / "stat").read_text())
        except (OSError, ValueError):
            continue
        ticks += stat.ticks
        processes += 1
    machine, steal = machine_and_steal(proc=proc)
    return Reading(
        ticks=ticks,
        processes=processes,
        load_1m=load_1m(proc=proc),
        machine_ticks=machine,
        steal_ticks=steal,
    )


def load_1m(*, proc: Path = PROC) -> float:
    return float((proc / "loadavg").read_text().split()[0])


def machine_and_steal(*, proc: Path = PROC) -> tuple[int, int]:
    """All CPU ticks and the steal ticks of the machine (proc(5): ``cpu`` line of
    ``/proc/stat``, fields user nice system idle iowait irq softirq steal ...)."""
    for line in (proc / "stat").read_text().splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            values = [int(v) for v in fields[1:9]]
            # guest time (fields 9-10) is already inside user and nice
            return sum(values), (values[7] if len(values) > 7 else 0)
    raise ValueError("no cpu line in /proc/stat")


def steal_pct(before: Reading, after: Reading) -> float | None:
    """Steal as a share of the machine's CPU time between two readings."""
    total = after.machine_ticks - before.machine_ticks
    if total <= 0:
        return None
    return round(100 * max(0, after.steal_ticks - before.steal_ticks) / total, 2)


def us_per_message(cpu_s: float, messages: int) -> float | None:
    """CPU microseconds per message, None when no message was handled."""
    if messages <= 0:
        return None
    return round(cpu_s * 1e6 / messages, 1)


def window(before: Reading, after: Reading, messages: int) -> dict[str, float | int | None]:
    """What the JSON says about one phase's server CPU and machine load."""
    cpu_s = after.cpu_s_since(before)
    return {
        "server_cpu_s": round(cpu_s, 3),
        "cpu_us_per_msg": us_per_message(cpu_s, messages),
        "server_processes": after.processes,
        "load_1m_start": before.load_1m,
        "load_1m_end": after.load_1m,
        "steal_pct": steal_pct(before, after),
    }
