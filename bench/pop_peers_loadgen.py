"""popfleet next to RocketMQ, NATS JetStream and Redis Streams, driven by a compiled load generator.

:mod:`bench.pop_peers` drives each system with a Python client, and on 2 cores
those clients are themselves a bottleneck. Here one Go binary
(``bench/loadgen``, built by :mod:`bench.peers.loadgen`) drives all of them with
the same phases, 1 KiB messages and batches of 32:

0. warm-up: ``--warmup-messages`` produced and popped+acked, not reported (the
   JVM compiles its hot paths; every system gets the same);
1. produce ``--messages`` (4 batches in flight);
2. pop+ack that backlog with 1 consumer (group ``g1``), then with 4 (``g4``);
3. end to end: producer and 1 consumer at once on a fresh topic (the max load);
4. latency at half of that rate for ``--latency-seconds``, measured from each
   message's intended send time (no coordinated omission);
5. redelivery lateness after ``--invisible-s`` (the receive's invisible time; the
   RocketMQ proxy accepts no less than 10 s), and for the two v2 systems also
   after ``--change-invisible-s`` set by ChangeInvisibleDuration right after the
   receive (how an official-client user gets below the proxy's minimum).

Systems: ``popfleet`` (``popbroker all``), ``popfleet-roles`` (the deployment
shape: store, popack and revive processes on a Unix socket), the same two behind
the compiled front end ``popfront`` (``popfleet-front``, ``popfleet-roles-front``:
the broker's v2 endpoint on a Unix socket, :mod:`popbroker.grpc.front`, the hot calls
framed, :mod:`popbroker.grpc.frontframes`; ``popfleet-front-grpc`` and
``popfleet-roles-front-grpc``: the same with every call on gRPC), ``rocketmq``
(5.3.3, name server + proxy in local mode, :mod:`bench.peers.rocketmq`), ``nats``
and ``redis`` (:mod:`bench.peers.servers`). Each run starts each system afresh
on a temp dir, in an order that rotates between runs, and stops it by PID.

Around every phase the harness reads the server's CPU seconds (its whole process
tree), the 1-minute load average and the host's steal share (:mod:`bench.peers.cpu`):
the JSON has CPU microseconds per message per phase.
``bench/results/pop_peers_loadgen.json`` keeps every run, the medians, the min-max
spread and the ratios popfleet/<peer> of the medians for every popfleet shape, each
shape against plain ``popfleet``, and ``popfleet-roles-front`` against
``popfleet-front`` (throughput: > 1 = popfleet faster; latency, lateness, CPU per
message: > 1 = popfleet slower or costlier).

Run: ``python -m bench.pop_peers_loadgen [--runs 3] [--messages 50000]`` (Go on
PATH; ``make bench`` sets it). Benchmarks are not tests: nothing asserts a timing.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import common
from bench.peers import cpu, loadgen, procs, rocketmq, servers, summary
from tools import gobuild

POPFLEET = (
    "popfleet", "popfleet-roles", "popfleet-front", "popfleet-roles-front",
    "popfleet-front-grpc", "popfleet-roles-front-grpc",
)  # fmt: skip
SYSTEMS = (*POPFLEET, "rocketmq", "nats", "redis")
# make bench's set: the -grpc shapes are for comparing popfront's transports (--systems)
DEFAULT_SYSTEMS = tuple(s for s in SYSTEMS if not s.endswith("-grpc"))
PEERS = ("rocketmq", "nats", "redis")
PROTOCOL = {**{system: "popfleet" for system in POPFLEET}, "rocketmq": "rocketmq"}
TOPICS = ("warmup", "bench", "e2e", "lat", "redeliver", "rechange")
GROUPS = ("gwarm", "g1", "g4", "ge2e", "glat", "gre", "grc")
READY_TRIES = 15

THROUGHPUT = ("produce", "pop_ack_1", "pop_ack_4", "end_to_end")
METRICS: tuple[summary.Metric, ...] = (
    *((f"{p}_msgs_per_s", (p, "msgs_per_s")) for p in THROUGHPUT),
    ("latency_rate_per_s", ("latency", "target_rate_per_s")),
    ("latency_p50_ms", ("latency", "p50_ms")),
    ("latency_p99_ms", ("latency", "p99_ms")),
    ("latency_drain_s", ("latency", "drain_after_end_s")),
    ("redelivery_p50_ms", ("redelivery", "p50_ms")),
    ("redelivery_p99_ms", ("redelivery", "p99_ms")),
    ("redelivery_max_ms", ("redelivery", "max_ms")),
    ("redelivery_change_p50_ms", ("redelivery_change", "p50_ms")),
    ("redelivery_change_p99_ms", ("redelivery_change", "p99_ms")),
    *((f"{p}_cpu_us_per_msg", (p, "cpu", "cpu_us_per_msg")) for p in (*THROUGHPUT, "latency")),
)
KEYS = [key for key, _ in METRICS]


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--warmup-messages", type=int, default=10_000)
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    parser.add_argument("--redelivery-messages", type=int, default=64)
    parser.add_argument("--invisible-s", type=float, default=10.0)
    parser.add_argument("--change-invisible-s", type=float, default=2.0)
    parser.add_argument("--await-s", type=float, default=5.0, help="receive wait when empty")
    parser.add_argument("--redis-poll-s", type=float, default=0.05)
    parser.add_argument("--cap-s", type=float, default=120.0, help="time cap of each phase")
    parser.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS))
    parser.add_argument("--name", default="pop_peers_loadgen", help="results file (no .json)")
    return parser.parse_args(argv)


def start(
    system: str, work_dir: Path, *, binaries: servers.Binaries | None, lib: Path | None
) -> procs.ServerSet:
    """Start one system on loopback in ``work_dir``; topics and groups as TOPICS, GROUPS."""
    if system in POPFLEET:
        return _start_popfleet(system, work_dir)
    if system == "rocketmq":
        assert lib is not None
        return rocketmq.start(work_dir, lib=lib, topics=TOPICS, groups=GROUPS)
    assert binaries is not None
    if system == "nats":
        return procs.ServerSet.of(servers.start_nats(binaries, work_dir))
    return procs.ServerSet.of(servers.start_redis(binaries, work_dir))


def _start_popfleet(system: str, work_dir: Path) -> procs.ServerSet:
    """A popfleet shape; the ``-front`` ones with ``popfront`` on the client port (its hot
    calls framed, ``-front-grpc``: all on gRPC)."""
    topics = [servers.PopfleetTopic(t) for t in TOPICS]
    front = "-front" in system
    client_port = procs.free_port() if front else None
    if system.startswith("popfleet-roles"):
        broker = servers.start_popfleet_roles(
            work_dir, topics=topics, groups=GROUPS, front_port=client_port
        )
    else:
        broker = procs.ServerSet.of(
            servers.start_popfleet(work_dir, topics=topics, groups=GROUPS, front_port=client_port)
        )
    if client_port is None:
        return broker
    try:
        binary = gobuild.ensure_built(gobuild.FRONT)
        popfront = servers.start_front(
            binary, work_dir, port=client_port, frames=not system.endswith("-grpc")
        )
    except BaseException:
        broker.stop()
        raise
    return procs.ServerSet(
        name=system, endpoint=popfront.endpoint, processes=[*broker.processes, popfront]
    )


def measure(
    system: str, server: procs.ServerSet, binary: Path, args: argparse.Namespace
) -> dict[str, Any]:
    """Every phase against one running system, each with its server CPU; one run's figures."""

    def phase(name: str, count_key: str, **fields: Any) -> dict[str, Any]:
        spec = loadgen.Phase(
            system=PROTOCOL.get(system, system),
            endpoint=server.endpoint,
            await_s=args.await_s,
            cap_s=args.cap_s,
            redis_poll_s=args.redis_poll_s,
            **fields,
        )
        before = cpu.read(server.root_pids())
        figures = loadgen.run_phase(binary, spec, netns_pid=server.netns_pid)
        after = cpu.read(server.root_pids())
        figures["cpu"] = cpu.window(before, after, int(figures.get(count_key) or 0))
        print(f"   {name:<18} {_line(figures)}", flush=True)
        return figures

    _wait_ready(lambda: phase("ready", "none", phase="ready", topics=TOPICS))
    out: dict[str, Any] = {}
    if args.warmup_messages > 0:
        n = args.warmup_messages
        warm = {"topic": "warmup", "count": n}
        out["warmup"] = {
            "produce": phase("warm-up produce", "messages", phase="produce", **warm),
            "pop_ack": phase("warm-up pop+ack", "messages", phase="popack", group="gwarm", **warm),
        }
    n = args.messages
    out["produce"] = phase("produce", "messages", phase="produce", topic="bench", count=n)
    backlog = int(out["produce"]["messages"])
    for consumers, group in ((1, "g1"), (4, "g4")):
        out[f"pop_ack_{consumers}"] = phase(
            f"pop+ack {consumers}", "messages", phase="popack", topic="bench", group=group,
            count=backlog, consumers=consumers,
        )  # fmt: skip
    out["end_to_end"] = phase(
        "end to end", "messages", phase="e2e", topic="e2e", group="ge2e", count=n
    )
    rate = max(10.0, float(out["end_to_end"]["msgs_per_s"]) / 2)
    out["latency"] = phase(
        "latency", "received", phase="latency", topic="lat", group="glat",
        rate=rate, duration_s=args.latency_seconds,
    )  # fmt: skip
    redeliver = {"phase": "redelivery", "count": args.redelivery_messages}
    out["redelivery"] = phase(
        "redelivery", "returned", topic="redeliver", group="gre", invisible_s=args.invisible_s,
        **redeliver,
    )  # fmt: skip
    if system in PROTOCOL and args.change_invisible_s > 0:
        out["redelivery_change"] = phase(
            "redelivery (change)", "returned", topic="rechange", group="grc",
            invisible_s=args.invisible_s, change_invisible_s=args.change_invisible_s, **redeliver,
        )  # fmt: skip
    return out


def _wait_ready(ready: Callable[[], dict[str, Any]]) -> None:
    """The endpoint answers and every topic resolves (bounded retries)."""
    for attempt in range(READY_TRIES):
        try:
            ready()
            return
        except RuntimeError:
            if attempt == READY_TRIES - 1:
                raise
            time.sleep(2)


def _line(figures: dict[str, Any]) -> str:
    parts = []
    if "msgs_per_s" in figures:
        parts.append(f"{figures['msgs_per_s']:>9.0f} msgs/s")
    if "p50_ms" in figures:
        parts.append(f"p50 {figures['p50_ms']:.1f} p99 {figures['p99_ms']:.1f} ms")
    if "drain_after_end_s" in figures:
        parts.append(
            f"@{figures['target_rate_per_s']:.0f}/s drain {figures['drain_after_end_s']:.2f} s"
        )
    window = figures.get("cpu", {})
    if window.get("cpu_us_per_msg") is not None:
        parts.append(f"cpu {window['cpu_us_per_msg']:.0f} us/msg")
    parts.append(f"load {window.get('load_1m_start', 0):.1f}->{window.get('load_1m_end', 0):.1f}")
    if window.get("steal_pct") is not None:
        parts.append(f"steal {window['steal_pct']:.1f}%")
    return "  ".join(parts)


def one_run(
    system: str,
    args: argparse.Namespace,
    *,
    binary: Path,
    binaries: servers.Binaries | None,
    lib: Path | None,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"pop-peers-lg-{system}-") as tmp:
        server = start(system, Path(tmp), binaries=binaries, lib=lib)
        try:
            figures = measure(system, server, binary, args)
            dead = [s.name for s in server.processes if not procs.pid_alive(s.pid)]
            if dead:
                raise RuntimeError(f"{system}: {dead} exited during the run")
        except BaseException:
            print(f"{system} failed; server logs:\n{server.log_tail()}", file=sys.stderr)
            raise
        finally:
            server.stop()
            left = server.alive_pids()
            if left:
                print(f"warning: {system} PIDs still alive after stop: {left}", file=sys.stderr)
    figures["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    return figures


def results(runs: dict[str, list[dict[str, Any]]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per system: runs, medians, spreads; ratios popfleet shape / peer of the medians."""
    medians = {s: summary.medians(r, METRICS) for s, r in runs.items()}
    systems = {
        s: {"runs": r, "median": medians[s], "spread": summary.spreads(r, METRICS)}
        for s, r in runs.items()
    }
    pairs = [(ours, peer) for ours in POPFLEET for peer in PEERS]
    # each shape against plain `popbroker all` (the front end's gain), and the deployment
    # shape against `all` with the same front (must not be slower, issue 17)
    pairs += [(ours, "popfleet") for ours in POPFLEET[1:]]
    pairs += [("popfleet-roles-front", "popfleet-front")]
    # popfront's framed calls against the same shape with every call on gRPC
    pairs += [("popfleet-front", "popfleet-front-grpc")]
    pairs += [("popfleet-roles-front", "popfleet-roles-front-grpc")]
    ratios = {
        f"{ours}/{theirs}": summary.ratios(medians[ours], medians[theirs], KEYS)
        for ours, theirs in pairs
        if ours in systems and theirs in systems
    }
    return systems, ratios


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    systems = [s for s in args.systems.split(",") if s]
    unknown = set(systems) - set(SYSTEMS)
    if unknown or args.runs < 1:
        raise SystemExit(f"unknown systems {sorted(unknown)} (choose from {SYSTEMS}), runs >= 1")
    built = time.monotonic()
    binary = loadgen.ensure_built()
    build_s = time.monotonic() - built
    needs_debian = any(s in ("nats", "redis") for s in systems)
    binaries = servers.ensure_binaries() if needs_debian else None
    lib = rocketmq.ensure_jars() if "rocketmq" in systems else None
    if any(s in POPFLEET for s in systems):
        reason = servers.popfleet_available()
        if reason is not None:
            raise SystemExit(f"popfleet not runnable: {reason}")

    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    load_before = [round(x, 2) for x in os.getloadavg()]
    started = time.monotonic()
    for run in range(args.runs):
        for system in summary.rotation(systems, run):
            print(f"== run {run + 1}/{args.runs}: {system}", flush=True)
            runs[system].append(one_run(system, args, binary=binary, binaries=binaries, lib=lib))
    per_system, ratios = results(runs)
    versions: dict[str, str] = {"rocketmq": rocketmq.VERSION, "loadgen": binary.parent.name}
    if binaries is not None:
        versions.update(binaries.versions())
    path = common.write(
        args.name,
        {
            "config": {k: v for k, v in vars(args).items() if k != "name"},
            "versions": versions,
            "systems": per_system,
            "ratios": ratios,
            "load_average": {
                "before": load_before,
                "after": [round(x, 2) for x in os.getloadavg()],
            },
            "loadgen_build_s": round(build_s, 1),
            "wall_seconds": round(time.monotonic() - started, 1),
            "note": "shared 2-core machine: figures move with whatever else runs",
        },
    )
    _print_summary(per_system, ratios)
    print(f"wrote {path}")
    return 0


def _print_summary(per_system: dict[str, Any], ratios: dict[str, Any]) -> None:
    def cell(value: float | None) -> str:
        return f"{value:>16.2f}" if value is not None else f"{'-':>16}"

    print(f"\n{'medians':<26}" + "".join(f"{name:>16}" for name in per_system))
    for key in KEYS:
        print(f"{key:<26}" + "".join(cell(e["median"][key]) for e in per_system.values()))
    for name, values in ratios.items():
        print(f"\n{name}: " + ", ".join(f"{k}={v}" for k, v in values.items() if v is not None))


if __name__ == "__main__":
    sys.exit(main())
