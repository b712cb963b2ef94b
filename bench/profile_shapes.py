"""Where each process of a popfleet shape spends its CPU during one load-generator phase.

The per-process view behind the figures of :mod:`bench.pop_peers_loadgen`: that
benchmark reports the CPU of a system's whole process tree; this one starts the
same systems (``popfleet``, ``popfleet-roles``, ``popfleet-front``,
``popfleet-roles-front``), runs one phase of the same load generator, and for every
process reports CPU microseconds per message from ``/proc`` and, for the Python
ones, a py-spy profile (raw stacks under ``bench/results/profiles/``, the top
functions by own and by inclusive samples, and own samples by area (:data:`AREAS`) in
the JSON). Phases:

* ``popack`` -- a backlog of ``--messages`` is produced first, then popped and acked
  with 4 consumers (the phase the roles-shape rule is about);
* ``produce`` -- ``--messages`` sent in batches of 32;
* ``latency`` -- the latency phase of :mod:`bench.pop_peers_loadgen`: a producer paced at
  ``--rate`` messages/s for ``--latency-s`` seconds and one consumer (calls of one to three
  messages, where the per-call costs are what a message pays);
* ``idle`` -- nothing for ``--idle-s`` seconds: what a broker costs doing nothing
  (revive polling, flushes, offset persistence).

Run on a quiet machine (like every benchmark): ``.venv/bin/python -m
bench.profile_shapes [--systems popfleet-front,popfleet-roles-front] [--phase popack]``
(Go on PATH; py-spy from ``requirements/bench.txt``). The results go to
``bench/results/profile_shapes.json``. Not part of ``make bench``: it measures where
time goes, not how fast a system is; py-spy's sampling costs the machine CPU too.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench import common
from bench import pop_peers_loadgen as peers
from bench.peers import cpu, loadgen, procs
from tools import gobuild

SYSTEMS = ("popfleet", "popfleet-roles", "popfleet-front", "popfleet-roles-front")
PHASES = ("popack", "produce", "latency", "idle")
TOP = 25
SAMPLING_HZ = 200
SPY_STOP_TIMEOUT_S = 30.0


# Where a sample's own time is, by the file of its innermost frame (first match wins):
# the question behind a compiled core is how much of the broker's Python is per-message
# encoding and POP bookkeeping (pure functions a compiled core could take over) and how
# much is the event loop and the orchestration around them (which it could not).
AREAS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "codecs and POP bookkeeping",
        (
            "popbroker/store/format.py",
            "popbroker/store/segments.py",
            "popbroker/store/commitlog.py",
            "popbroker/store/consumequeue.py",
            "popbroker/store/api.py",
            "popbroker/pop/",
            "popbroker/grpc/front.py",
        ),
    ),
    (
        "event loop, sockets and framing",
        (
            "asyncio/",
            "selectors.py",
            "socket.py",
            "popbroker/store/wire/frames.py",
            "popbroker/grpc/frontframes.py",
        ),
    ),
    ("dataclass and protobuf construction", ("<string>", "google/", "dataclasses.py")),
    ("our orchestration (services, servicer, store)", ("popbroker/",)),
)
OTHER_AREA = "other"


def area_of(frame: str) -> str:
    """The :data:`AREAS` entry of a py-spy frame ``function (file:line)``."""
    where = frame.rpartition(" (")[2]
    for name, prefixes in AREAS:
        if any(prefix in where for prefix in prefixes):
            return name
    return OTHER_AREA


def top_functions(raw: Iterable[str], *, top: int = TOP) -> dict[str, Any]:
    """The most sampled functions of py-spy's ``--format raw`` output (one ``frame;frame;...
    count`` line per stack, root first): by own samples and by samples anywhere in the
    stack, each as a share of all samples."""
    own: collections.Counter[str] = collections.Counter()
    anywhere: collections.Counter[str] = collections.Counter()
    areas: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw:
        stack, _, count_text = line.rstrip("\n").rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        total += count
        own[frames[-1]] += count
        areas[area_of(frames[-1])] += count
        for frame in set(frames):
            anywhere[frame] += count

    def shares(counter: collections.Counter[str]) -> list[tuple[str, float]]:
        return [(frame, round(100 * n / total, 1)) for frame, n in counter.most_common(top)]

    return {
        "samples": total,
        "own_pct": shares(own),
        "inclusive_pct": shares(anywhere),
        "own_by_area_pct": shares(areas),
    }


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--systems", default="popfleet-front,popfleet-roles-front")
    parser.add_argument("--phase", choices=PHASES, default="popack")
    parser.add_argument("--rate", type=float, default=3000.0, help="latency: messages/s")
    parser.add_argument("--latency-s", type=float, default=10.0, help="latency: seconds")
    parser.add_argument("--messages", type=int, default=40_000)
    parser.add_argument("--idle-s", type=float, default=10.0)
    parser.add_argument("--name", default="profile_shapes", help="results file (no .json)")
    parser.add_argument(
        "--no-spy", action="store_true", help="CPU per process only, no py-spy (its sampling "
        "costs the machine CPU, which moves a latency tail)",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=1, help="rounds per system, alternating")
    return parser.parse_args(argv)


def _py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(found).is_file():
        raise SystemExit("py-spy not found: pip install -r requirements/bench.txt")
    return found


def profile(
    system: str, args: argparse.Namespace, *, binary: Path, spy: str | None, out_dir: Path
) -> dict[str, Any]:
    """One system, one phase: CPU per process and a profile of each Python process."""
    with tempfile.TemporaryDirectory(prefix=f"profile-{system}-") as tmp:
        server = peers.start(system, Path(tmp), binaries=None, lib=None)
        try:

            def run(**fields: Any) -> dict[str, Any]:
                spec = loadgen.Phase(
                    system="popfleet", endpoint=server.endpoint, await_s=5.0, cap_s=120.0,
                    redis_poll_s=0.05, **fields,
                )  # fmt: skip
                return loadgen.run_phase(binary, spec, netns_pid=server.netns_pid)

            peers._wait_ready(lambda: run(phase="ready", topics=peers.TOPICS))
            run(phase="produce", topic="warmup", count=5_000)
            run(phase="popack", topic="warmup", group="gwarm", count=5_000)
            if args.phase == "popack":
                run(phase="produce", topic="bench", count=args.messages)
            spies = {}
            if spy is not None:
                spies = _start_spies(server, system, args.phase, spy=spy, out_dir=out_dir)
            before = {p.name: cpu.read([p.pid]) for p in server.processes}
            started = time.monotonic()
            if args.phase == "idle":
                time.sleep(args.idle_s)  # the phase *is* a wall-clock interval
                figures: dict[str, Any] = {}
            elif args.phase == "produce":
                figures = run(phase="produce", topic="bench", count=args.messages)
            elif args.phase == "latency":
                figures = run(
                    phase="latency", topic="bench", group="glat", rate=args.rate,
                    duration_s=args.latency_s,
                )  # fmt: skip
                figures["messages"] = figures["received"]
            else:
                figures = run(
                    phase="popack", topic="bench", group="g4", count=args.messages, consumers=4
                )
            wall_s = time.monotonic() - started
            after = {p.name: cpu.read([p.pid]) for p in server.processes}
            files = _stop_spies(spies)
        finally:
            server.stop()
    messages = int(figures.get("messages") or 0)
    processes: dict[str, Any] = {}
    for name, earlier in before.items():
        cpu_s = after[name].cpu_s_since(earlier)
        entry: dict[str, Any] = {
            "cpu_us_per_msg": cpu.us_per_message(cpu_s, messages),
            "cpu_pct_of_a_core": round(100 * cpu_s / wall_s, 1),
        }
        if name in files and files[name].exists():
            with files[name].open() as raw:
                entry["profile"] = top_functions(raw)
            entry["raw_stacks"] = str(files[name])
        processes[name] = entry
    window = cpu.window(next(iter(before.values())), next(iter(after.values())), messages)
    latency = {k: v for k, v in figures.items() if k.endswith("_ms")}
    return {
        "phase": args.phase,
        **({"latency": latency} if latency else {}),
        "msgs_per_s": figures.get("msgs_per_s"),
        "messages": messages,
        "wall_s": round(wall_s, 2),
        "load_1m": [window["load_1m_start"], window["load_1m_end"]],
        "steal_pct": window["steal_pct"],
        "processes": processes,
    }


def _start_spies(
    server: procs.ServerSet, system: str, phase: str, *, spy: str, out_dir: Path
) -> dict[str, tuple[subprocess.Popen[bytes], Path]]:
    spies = {}
    for process in server.processes:
        if process.name == "popfront":  # Go: `popfront -cpuprofile` is its profiler
            continue
        out = out_dir / f"{system}-{process.name}-{phase}.txt"
        argv = [spy, "record", "-p", str(process.pid), "-f", "raw", "-o", str(out),
                "-r", str(SAMPLING_HZ), "--nonblocking"]  # fmt: skip
        spies[process.name] = (
            subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
            out,
        )
    time.sleep(1.0)  # py-spy attaches before the phase starts; not a synchronisation
    return spies


def _stop_spies(spies: dict[str, tuple[subprocess.Popen[bytes], Path]]) -> dict[str, Path]:
    """SIGINT makes py-spy write its file; wait for each by PID (bounded)."""
    for popen, _ in spies.values():
        os.kill(popen.pid, signal.SIGINT)
    for popen, _ in spies.values():
        popen.wait(timeout=SPY_STOP_TIMEOUT_S)
    return {name: out for name, (_, out) in spies.items()}


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    systems = [s for s in args.systems.split(",") if s]
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown:
        raise SystemExit(f"unknown systems {unknown}; choose from {SYSTEMS}")
    spy = None if args.no_spy else _py_spy()
    binary = gobuild.ensure_built(gobuild.LOADGEN)
    out_dir = common.RESULTS / "profiles"
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    for round_no in range(args.rounds):
        for system in systems:
            key = system if args.rounds == 1 else f"{system}#{round_no + 1}"
            results[key] = found = profile(system, args, binary=binary, spy=spy, out_dir=out_dir)
            if "latency" in found:
                lat = found["latency"]
                print(f"{key:<22} latency p50 {lat.get('p50_ms')} p99 {lat.get('p99_ms')} ms, "
                      f"load {found['load_1m']}")  # fmt: skip
            for name, entry in found["processes"].items():
                per_msg = entry["cpu_us_per_msg"]
                shown = f"{per_msg:.1f} us/msg" if per_msg is not None else "-"
                share = f"{entry['cpu_pct_of_a_core']:5.1f}% of a core"
                print(f"{key:<22} {name:<18} {shown:>14}  {share}")
    path = common.write(args.name, {"systems": results})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
