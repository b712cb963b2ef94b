"""popfleet next to NATS JetStream and Redis Streams: POP-style consumption on loopback.

One run starts each server in turn on a fresh temp dir and a free 127.0.0.1 port
(:mod:`bench.peers.servers`), measures it, and stops it by PID. Every system gets
the same four phases through its adapter (:mod:`bench.peers.workload`), with 1 KiB
messages and batches of 32:

1. produce ``--messages`` (4 batches in flight from one producer process);
2. pop+ack the backlog with 1 consumer process (group ``g1``), then the same
   backlog again with 4 consumer processes (group ``g4``);
3. the max load: producer and 1 consumer at once, end to end; then send->receive
   latency p50/p99 at half of that rate for ``--latency-seconds``;
4. redelivery lateness after the invisible deadline (``--invisible-s``): popfleet's
   invisible time, NATS' AckWait, Redis' XAUTOCLAIM min-idle-time polled every
   ``--redis-poll-s``.

popfleet is driven by our batching v2 generator (:mod:`bench.peers.v2load`); its
official-client figure (:mod:`bench.peers.officialload`) is measured next to it.
The order of the systems rotates between runs. The JSON (``bench/results/
pop_peers.json``) keeps every run, the medians of the runs and the ratios
popfleet/NATS and popfleet/Redis of the medians (for throughput > 1 means popfleet
is faster; for latency and lateness > 1 means popfleet is slower).

Needs the bench-only clients: ``.venv/bin/pip install -r requirements/bench.txt``.
The servers come from Debian (``apt-get install -y nats-server redis-server``;
installed by the harness when missing and run as root).

Run: ``python -m bench.pop_peers [--runs 3] [--messages 20000]``. Benchmarks are
not tests: nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import common
from bench.peers import cpu, servers, summary, workload

SYSTEMS = ("nats", "redis", "popfleet")
PEERS = ("nats", "redis")
NOT_MEASURED = "not measured: endpoint not available"
TOPICS = ("bench", "e2e", "lat", "redeliver", "official")
GROUPS = ("g1", "g4", "ge2e", "glat", "gre", "gofficial")

# (JSON key, path into one run's figures); throughput first, then latency-like.
METRICS: tuple[summary.Metric, ...] = (
    ("produce_msgs_per_s", ("produce", "msgs_per_s")),
    ("pop_ack_1_msgs_per_s", ("pop_ack_1", "msgs_per_s")),
    ("pop_ack_4_msgs_per_s", ("pop_ack_4", "msgs_per_s")),
    ("end_to_end_msgs_per_s", ("end_to_end", "msgs_per_s")),
    ("latency_rate_per_s", ("latency", "target_rate_per_s")),
    ("latency_p50_ms", ("latency", "p50_ms")),
    ("latency_p99_ms", ("latency", "p99_ms")),
    ("latency_drain_s", ("latency", "drain_after_end_s")),
    ("redelivery_p50_ms", ("redelivery", "p50_ms")),
    ("redelivery_p99_ms", ("redelivery", "p99_ms")),
    ("redelivery_max_ms", ("redelivery", "max_ms")),
    *(
        (f"{phase}_cpu_us_per_msg", (phase, "cpu", "cpu_us_per_msg"))
        for phase in ("produce", "pop_ack_1", "pop_ack_4", "end_to_end", "latency")
    ),
)
KEYS = [key for key, _ in METRICS]
OFFICIAL_METRICS: tuple[summary.Metric, ...] = (
    ("produce_msgs_per_s", ("produce", "msgs_per_s")),
    ("pop_ack_1_msgs_per_s", ("pop_ack_1", "msgs_per_s")),
)


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--official-messages", type=int, default=2_000)
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    parser.add_argument("--redelivery-messages", type=int, default=64)
    parser.add_argument("--invisible-s", type=float, default=2.0)
    parser.add_argument("--redis-poll-s", type=float, default=0.05)
    parser.add_argument("--cap-s", type=float, default=60.0, help="time cap of each phase")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--name", default="pop_peers", help="results file name (no .json)")
    return parser.parse_args(argv)


def _measure(
    system: str, endpoint: str, args: argparse.Namespace, roots: list[int]
) -> dict[str, Any]:
    """The four phases against one running server; one run's figures.

    Each phase's figures carry the server's CPU (process tree of ``roots``) and the
    load average around it (:mod:`bench.peers.cpu`).
    """

    def spec(topic: str, group: str, **extra: Any) -> workload.Spec:
        return workload.Spec(system=system, endpoint=endpoint, topic=topic, group=group, **extra)

    def metered(result: Any, before: cpu.Reading, count_key: str) -> dict[str, Any]:
        figures: dict[str, Any] = result.as_json()
        after = cpu.read(roots)
        figures["cpu"] = cpu.window(before, after, int(figures.get(count_key) or 0))
        return figures

    figures: dict[str, Any] = {}
    before = cpu.read(roots)
    produced = workload.produce(spec("bench", "g1"), count=args.messages, cap_s=args.cap_s)
    figures["produce"] = metered(produced, before, "messages")
    for consumers, group in ((1, "g1"), (4, "g4")):
        before = cpu.read(roots)
        popped = workload.pop_ack(
            spec("bench", group), target=produced.count, consumers=consumers, cap_s=args.cap_s
        )
        figures[f"pop_ack_{consumers}"] = metered(popped, before, "messages")
    before = cpu.read(roots)
    e2e = workload.end_to_end(spec("e2e", "ge2e"), count=args.messages, cap_s=args.cap_s)
    figures["end_to_end"] = metered(e2e, before, "messages")
    rate = max(10.0, e2e.per_s / 2)
    before = cpu.read(roots)
    lat = workload.latency(spec("lat", "glat"), rate=rate, duration_s=args.latency_seconds)
    figures["latency"] = metered(lat, before, "received")
    before = cpu.read(roots)
    redelivered = workload.redelivery(
        spec("redeliver", "gre", invisible_s=args.invisible_s, reclaim_poll_s=args.redis_poll_s),
        count=args.redelivery_messages,
        cap_s=args.invisible_s * 3 + 20,
    )
    figures["redelivery"] = metered(redelivered, before, "returned")
    return figures


def _measure_official(endpoint: str, args: argparse.Namespace) -> dict[str, Any]:
    from bench.peers import officialload  # noqa: PLC0415 - popfleet only

    produced = officialload.produce(
        endpoint, "official", count=args.official_messages, cap_s=args.cap_s
    )
    consumed = officialload.pop_ack(
        endpoint, "official", "gofficial", count=produced.count, cap_s=args.cap_s
    )
    return {"produce": produced.as_json(), "pop_ack_1": consumed.as_json()}


def _one_run(system: str, args: argparse.Namespace, binaries: servers.Binaries) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"pop-peers-{system}-") as tmp:
        work_dir = Path(tmp)
        if system == "nats":
            server = servers.start_nats(binaries, work_dir)
        elif system == "redis":
            server = servers.start_redis(binaries, work_dir)
        else:
            server = servers.start_popfleet(
                work_dir, topics=[servers.PopfleetTopic(t) for t in TOPICS], groups=GROUPS
            )
        try:
            figures = _measure(system, server.endpoint, args, [server.pid])
            if system == "popfleet" and args.official_messages > 0:
                figures["official_client"] = _measure_official(server.endpoint, args)
        except BaseException:
            print(f"{system} failed; server log tail:\n{server.log_tail()}", file=sys.stderr)
            raise
        finally:
            server.stop()
            left = server.alive_pids()
            if left:
                print(f"warning: {system} PIDs still alive after stop: {left}", file=sys.stderr)
    figures["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    return figures


def _config(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "runs": args.runs,
        "messages": args.messages,
        "body_bytes": workload.BODY_BYTES,
        "batch": workload.BATCH,
        "producer_inflight_batches": 4,
        "official_messages": args.official_messages,
        "latency_seconds": args.latency_seconds,
        "latency_rate": "half of end_to_end (produce + 1 consumer at once) of the same run",
        "redelivery_messages": args.redelivery_messages,
        "invisible_s": args.invisible_s,
        "redis_reclaim_poll_s": args.redis_poll_s,
        "phase_cap_s": args.cap_s,
    }


METHOD = {
    "nats": "nats-server -js, file-backed stream, durable pull consumer: publish_async x32 "
    "then wait every PubAck; fetch(32) + msg.ack() x n + one flush (PING/PONG); "
    "redelivery = AckWait",
    "redis": "redis-server AOF everysec, no RDB: pipelined XADD x32; XREADGROUP COUNT 32 "
    "+ one XACK; redelivery = XAUTOCLAIM min-idle-time=invisible, polled by the consumer "
    "every redis_reclaim_poll_s (Redis has no redelivery timer: its figure is the "
    "polling interval's)",
    "popfleet": "popbroker all (async flush) driven by bench/peers/v2load.py: SendMessage "
    "with 32 messages; ReceiveMessage batch 32 + one AckMessage with 32 entries; "
    "redelivery = invisible time, revived to the retry topic",
    "official_client": "rocketmq-python-client 5.1.2 Producer.send_async / SimpleConsumer "
    "receive(32) + ack: one message per RPC, window of 32 in flight",
    "latency": "scheduled send time (CLOCK_MONOTONIC) to receive, 1 paced producer + 1 "
    "consumer process; first 0.5 s dropped",
    "redelivery": "lateness = return time - (receive request start + invisible time): an "
    "upper bound, includes up to one receive round trip",
}


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    systems = [s for s in args.systems.split(",") if s]
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        raise SystemExit(f"unknown systems {sorted(unknown)}; choose from {SYSTEMS}")
    if "nats" in systems:
        workload.requirement("nats")
    if "redis" in systems:
        workload.requirement("redis")
    binaries = servers.ensure_binaries()
    popfleet_reason = servers.popfleet_available() if "popfleet" in systems else None
    if popfleet_reason is not None:
        print(f"popfleet {NOT_MEASURED}: {popfleet_reason}", file=sys.stderr)
    measured = [s for s in systems if s != "popfleet" or popfleet_reason is None]

    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in measured}
    load_before = [round(x, 2) for x in os.getloadavg()]
    started = time.monotonic()
    for run in range(args.runs):
        for system in summary.rotation(measured, run):
            print(f"== run {run + 1}/{args.runs}: {system}", flush=True)
            figures = _one_run(system, args, binaries)
            runs[system].append(figures)
            _print_run(system, figures)

    results: dict[str, Any] = {}
    for system in measured:
        entry: dict[str, Any] = {
            "runs": runs[system],
            "median": summary.medians(runs[system], METRICS),
        }
        official = [r["official_client"] for r in runs[system] if "official_client" in r]
        if official:
            entry["official_client"] = {
                "runs": official,
                "median": summary.medians(official, OFFICIAL_METRICS),
            }
        results[system] = entry
    if "popfleet" in systems and popfleet_reason is not None:
        results["popfleet"] = {"status": NOT_MEASURED, "reason": popfleet_reason}

    ratios: dict[str, Any] = {}
    if "popfleet" in measured:
        for peer in PEERS:
            if peer in measured:
                ratios[f"popfleet/{peer}"] = summary.ratios(
                    results["popfleet"]["median"], results[peer]["median"], KEYS
                )
    elif "popfleet" in systems:
        ratios = {f"popfleet/{peer}": NOT_MEASURED for peer in PEERS if peer in measured}

    path = common.write(
        args.name,
        {
            "config": _config(args),
            "versions": {**binaries.versions(), **_client_versions()},
            "method": METHOD,
            "systems": results,
            "ratios": ratios,
            "load_average": {
                "before": load_before,
                "after": [round(x, 2) for x in os.getloadavg()],
            },
            "wall_seconds": round(time.monotonic() - started, 1),
            "note": "shared 2-core machine: figures move with whatever else runs",
        },
    )
    _print_summary(results, ratios)
    print(f"wrote {path}")
    return 0


def _client_versions() -> dict[str, str]:
    from importlib import metadata  # noqa: PLC0415

    out: dict[str, str] = {}
    for dist in ("nats-py", "redis", "rocketmq-python-client", "grpcio"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def _print_run(system: str, figures: dict[str, Any]) -> None:
    def line(key: str) -> str:
        return f"{figures[key]['msgs_per_s']:>8.0f}/s"

    lat, red = figures["latency"], figures["redelivery"]
    print(
        f"   produce {line('produce')}  pop+ack 1 {line('pop_ack_1')}  "
        f"pop+ack 4 {line('pop_ack_4')}  e2e {line('end_to_end')}\n"
        f"   latency@{lat['target_rate_per_s']:.0f}/s "
        f"p50 {lat['p50_ms']:.2f} p99 {lat['p99_ms']:.2f} ms "
        f"(drain {lat['drain_after_end_s']:.2f} s)  "
        f"redelivery p50 {red['p50_ms']:.0f} p99 {red['p99_ms']:.0f} ms",
        flush=True,
    )
    if "official_client" in figures:
        off = figures["official_client"]
        print(
            f"   official client: produce {off['produce']['msgs_per_s']:.0f}/s  "
            f"pop+ack 1 {off['pop_ack_1']['msgs_per_s']:.0f}/s",
            flush=True,
        )


def _print_summary(results: dict[str, Any], ratios: dict[str, Any]) -> None:
    def cells(values: dict[str, float | None], digits: int) -> str:
        return "".join(
            f"{values[k]:>20.{digits}f}" if values.get(k) is not None else f"{'-':>20}"
            for k in KEYS
        )

    print("\nmedians:")
    print(f"{'':<12}" + "".join(f"{k[:18]:>20}" for k in KEYS))
    for system, entry in results.items():
        if "median" not in entry:
            print(f"{system:<12}{entry.get('status', '')}")
            continue
        print(f"{system:<12}" + cells(entry["median"], 2))
        if "official_client" in entry:
            print(f"{'  official':<12}" + cells(entry["official_client"]["median"], 2))
    for name, values in ratios.items():
        if isinstance(values, dict):
            print(f"{name:<12}" + cells(values, 3))


if __name__ == "__main__":
    sys.exit(main())
