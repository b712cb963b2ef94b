"""PULL vs POP with a hung consumer: the seeds' headline claim, measured.

Scenario (DESIGN §3.3, issue 4): one real ``popbroker all``; per mode a topic
with 2 queues and a group of 4 official ``PushConsumer`` processes
(:mod:`bench.peers.pushworker`: 5 ms of processing per message, one
consumption thread, a cache of 32 messages). A producer offers a steady
``--rate`` for ``--duration-s``; at ``--hang-at-s`` one consumer hangs (its
listener never returns: it never acks, keeps heartbeating, keeps the messages
it popped). PULL runs first, then POP (``popShareQueueNum`` 0), in the same
run against the same broker.

Steps per mode:

  1. The topic starts write-only; the 4 consumers start and register; the
     topic is made readable through the admin API, so every consumer gets its
     final assignment at its first refresh. Wait until the group has popped
     both queues once (a new group's POP offset starts at the queue's end).
  2. The hung consumer is chosen: in PULL the owner of queue 0 (in PULL only
     two consumers own a queue; an idle one hanging would change nothing); in
     POP the same position in the fleet.
  3. Produce at ``--rate`` (official ``Producer``; the broker alternates the
     queues); every ``SAMPLE_S`` read each queue's max offset (admin API) and
     count what the consumers processed per queue. Backlog of a queue = its
     max offset - messages processed from it (held-but-unacked ones count as
     backlog). Throughput = messages processed per 1 s bin.
  4. Stop at ``--duration-s``; stop the consumers by PID.

Figures: throughput before and after the hang (mean over the window and
median of the 1 s bins), the ratio POP/PULL of the after-hang mean, and each
queue's backlog at the end. JSON: ``bench/results/pull_vs_pop.json`` (with
the series); plot: ``docs/images/pull_vs_pop.png``.

Run: ``python -m bench.pull_vs_pop [--rate 60] [--duration-s 30]``. About
2 x (duration + ~20 s start-up). Benchmarks are not tests: nothing here
asserts a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from rocketmq import ClientConfiguration, Credentials, Message, Producer

from bench import common, pull_vs_pop_plot
from bench.peers import procs, servers
from bench.peers.pushfleet import PushFleet, wait_until
from popbroker.store.api import (
    ConsumeMode,
    ConsumeModeConfig,
    GroupConfig,
    Permission,
    TopicConfig,
)
from popbroker.store.local import LocalStore
from popbroker.store.settings import StoreSettings
from popfleet_api import models
from popfleet_api.client import BrokerAdmin

NAME = "pull_vs_pop"
MODES = ("PULL", "POP")
NAMES = ("c0", "c1", "c2", "c3")
SAMPLE_S = 0.5
SETTLE_S = 30.0  # start-up waits (assignment refresh 5 s, loaded machine)
PNG = Path(__file__).resolve().parents[1] / "docs" / "images" / "pull_vs_pop.png"
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Config:
    rate_per_s: float = 60.0
    duration_s: float = 30.0
    hang_at_s: float = 10.0
    processing_ms: float = 5.0
    max_cache: int = 32


def _topic(mode: str) -> str:
    return f"{mode.lower()}-orders"


def _group(mode: str) -> str:
    return f"{mode.lower()}-readers"


def _run(coro_fn: Callable[[], Awaitable[T]]) -> T:
    loop = asyncio.new_event_loop()  # the main thread keeps its own loop for the client
    try:
        return loop.run_until_complete(coro_fn())
    finally:
        loop.close()


# -- the broker --------------------------------------------------------------------------------


async def _seed(data_dir: Path) -> None:
    store = LocalStore.open(data_dir, StoreSettings())
    try:
        for mode in MODES:
            await store.put_topic(TopicConfig(_topic(mode), 2, 2, perm=Permission.WRITE))
            await store.put_group(GroupConfig(_group(mode)))
        await store.put_consume_mode(
            ConsumeModeConfig(_group("POP"), _topic("POP"), ConsumeMode.POP, 0)
        )
    finally:
        await store.close()


def start_broker(work_dir: Path) -> tuple[procs.ServerProcess, str]:
    """``popbroker all`` with its admin API; returns it and the admin target."""
    data_dir = work_dir / "data"
    asyncio.run(_seed(data_dir))
    port = procs.free_port()
    port_file, admin_file = work_dir / "port", work_dir / "admin-port"
    argv = [
        *servers.popbroker_argv(), "all",
        "--data-dir", str(data_dir),
        "--listen", f"{procs.HOST}:{port}",
        "--port-file", str(port_file),
        "--admin-listen", f"{procs.HOST}:0",
        "--admin-port-file", str(admin_file),
    ]  # fmt: skip
    broker = procs.start(
        "popfleet",
        argv,
        work_dir=work_dir,
        port=port,
        ready=lambda _port: port_file.exists() and admin_file.exists(),
        ready_timeout_s=SETTLE_S,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    return broker, f"{procs.HOST}:{admin_file.read_text().strip()}"


def _offsets(admin: str, mode: str) -> dict[int, models.QueueOffsets]:
    async def read() -> models.GroupOffsets:
        async with BrokerAdmin(admin) as client:
            return await client.offsets(_group(mode), [_topic(mode)])

    return {q.queue_id: q for q in _run(read).queues if q.topic == _topic(mode)}


def _make_readable(admin: str, mode: str) -> None:
    async def put() -> None:
        async with BrokerAdmin(admin) as client:
            await client.put_topic(models.Topic(_topic(mode), 2, 2))

    _run(put)


# -- one mode ----------------------------------------------------------------------------------


class _Producer:
    """The official Producer at a steady rate, in a thread, until stopped or out of budget."""

    def __init__(self, endpoint: str, topic: str, *, rate_per_s: float, budget: int) -> None:
        self._client = Producer(
            ClientConfiguration(endpoint, Credentials(), request_timeout=3), (topic,)
        )
        self._client.startup()  # in the caller's (main) thread: the client needs its loop
        self._topic = topic
        self._interval_s = 1.0 / rate_per_s
        self._budget = budget
        self._stop = threading.Event()
        self.sent = 0
        self.errors = 0
        self._thread = threading.Thread(target=self._loop, name="producer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        started = time.monotonic()
        while not self._stop.is_set() and self.sent + self.errors < self._budget:
            due = started + (self.sent + self.errors) * self._interval_s
            if self._stop.wait(max(0.0, due - time.monotonic())):
                break
            message = Message()
            message.topic = self._topic
            message.body = f"m-{self.sent + self.errors}".encode()
            try:
                self._client.send(message)
                self.sent += 1
            except Exception:  # noqa: BLE001 - a failed send is counted, the run goes on
                self.errors += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self._client.shutdown()


def _settle(fleet: PushFleet, admin: str, mode: str) -> dict[str, list[int]]:
    _make_readable(admin, mode)

    def final(found: dict[str, list[int]]) -> bool:
        if mode == "POP":
            return all(queues == [-1] for queues in found.values())
        return sorted(q for queues in found.values() for q in queues) == [0, 1]

    wait_until(lambda: final(fleet.assignments()), what=f"{mode} assignment", timeout_s=SETTLE_S)
    wait_until(
        lambda: all(o.committed_queue_offset is not None for o in _offsets(admin, mode).values()),
        what=f"{mode}: both queues popped once",
        timeout_s=SETTLE_S,
    )
    return fleet.assignments()


def _bins(times: list[float], *, duration_s: float) -> list[int]:
    counts = [0] * int(duration_s)
    for t in times:
        if 0 <= t < duration_s:
            counts[int(t)] += 1
    return counts


def _window(bins: list[int], start_s: float, end_s: float) -> dict[str, float]:
    chosen = bins[int(start_s) : int(end_s)]
    return {
        "mean_msgs_per_s": sum(chosen) / max(1, len(chosen)),
        "median_msgs_per_s": statistics.median(chosen) if chosen else 0.0,
    }


def run_mode(
    mode: str, *, endpoint: str, admin: str, work_dir: Path, config: Config
) -> dict[str, Any]:
    """Steps 1-4 for one mode; the figures and the series."""
    fleet = PushFleet(
        endpoint=endpoint,
        group=_group(mode),
        topic=_topic(mode),
        work_dir=work_dir / mode.lower(),
        names=NAMES,
        processing_ms=config.processing_ms,
        threads=1,
        max_cache=config.max_cache,
    )
    with fleet:
        assigned = _settle(fleet, admin, mode)
        hung = next(n for n, q in assigned.items() if 0 in q) if mode == "PULL" else NAMES[0]
        budget = int(config.rate_per_s * config.duration_s) + 1
        producer = _Producer(endpoint, _topic(mode), rate_per_s=config.rate_per_s, budget=budget)
        samples: list[dict[str, float]] = []
        t0 = time.time()
        producer.start()
        hung_at: float | None = None
        try:
            while (now := time.time() - t0) < config.duration_s:
                if hung_at is None and now >= config.hang_at_s:
                    fleet.hang(hung)
                    hung_at = time.time() - t0
                samples.append(_sample(fleet, admin, mode, now))
                time.sleep(max(0.0, SAMPLE_S - (time.time() - t0 - now)))  # the sampling period
        finally:
            producer.stop()
        samples.append(_sample(fleet, admin, mode, time.time() - t0))
        consumed = fleet.consumed()
    times = [m.t - t0 for m in consumed]
    bins = _bins(times, duration_s=config.duration_s)
    hang_s = hung_at if hung_at is not None else config.hang_at_s
    final = samples[-1]
    return {
        "mode": mode,
        "hung_consumer": hung,
        "hung_queue": 0 if mode == "PULL" else -1,
        "assignment": assigned,
        "hang_at_s": round(hang_s, 2),
        "sent": producer.sent,
        "send_errors": producer.errors,
        "offered_msgs_per_s": producer.sent / config.duration_s,
        "consumed": len(consumed),
        "before_hang": _window(bins, 1, hang_s),
        "after_hang": _window(bins, hang_s + 1, config.duration_s),
        "backlog_at_end": {"q0": final["backlog_q0"], "q1": final["backlog_q1"]},
        "throughput_bins": bins,
        "samples": samples,
    }


def _sample(fleet: PushFleet, admin: str, mode: str, t: float) -> dict[str, float]:
    queues = _offsets(admin, mode)
    consumed = [m for m in fleet.consumed() if not m.retry]
    done = {q: sum(1 for m in consumed if m.queue == q) for q in (0, 1)}
    return {
        "t": round(t, 2),
        "backlog_q0": queues[0].max_queue_offset - done[0],
        "backlog_q1": queues[1].max_queue_offset - done[1],
    }


def summarise(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The headline figures of both modes' runs."""
    pull_after = runs["PULL"]["after_hang"]["mean_msgs_per_s"]
    pop_after = runs["POP"]["after_hang"]["mean_msgs_per_s"]
    pull_median = runs["PULL"]["after_hang"]["median_msgs_per_s"]
    pop_median = runs["POP"]["after_hang"]["median_msgs_per_s"]
    return {
        "pull_after_hang_msgs_per_s": pull_after,
        "pop_after_hang_msgs_per_s": pop_after,
        "ratio_pop_over_pull_after_hang": pop_after / pull_after if pull_after else None,
        "ratio_pop_over_pull_after_hang_bin_medians": (
            pop_median / pull_median if pull_median else None
        ),
        "pull_hung_queue_backlog_at_end": runs["PULL"]["backlog_at_end"]["q0"],
        "pop_backlog_at_end": runs["POP"]["backlog_at_end"],
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.pull_vs_pop")
    defaults = Config()
    parser.add_argument("--rate", type=float, default=defaults.rate_per_s, help="msgs/s offered")
    parser.add_argument("--duration-s", type=float, default=defaults.duration_s)
    parser.add_argument("--hang-at-s", type=float, default=defaults.hang_at_s)
    parser.add_argument("--processing-ms", type=float, default=defaults.processing_ms)
    parser.add_argument("--max-cache", type=int, default=defaults.max_cache)
    return parser


def main() -> None:
    args = _parser().parse_args()
    config = Config(args.rate, args.duration_s, args.hang_at_s, args.processing_ms, args.max_cache)
    if not 0 < config.hang_at_s < config.duration_s <= 120 or config.rate_per_s > 2000:
        raise SystemExit("need 0 < hang-at < duration <= 120 s and rate <= 2000 msgs/s")
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="pull-vs-pop-") as tmp:
        broker, admin = start_broker(Path(tmp) / "broker")  # asyncio.run: leaves no loop
        asyncio.set_event_loop(asyncio.new_event_loop())  # the official client wants one
        try:
            for mode in MODES:
                print(f"-- {mode}", flush=True)
                runs[mode] = run_mode(
                    mode, endpoint=broker.endpoint, admin=admin, work_dir=Path(tmp), config=config
                )
        finally:
            broker.stop()
    summary = summarise(runs)
    path = common.write(NAME, {"config": _config(config), "summary": summary, "runs": runs})
    pull_vs_pop_plot.plot(runs, config=_config(config), path=PNG)
    print(f"wrote {path} and {PNG}")
    for key, value in summary.items():
        print(f"  {key}: {value}")


def _config(config: Config) -> dict[str, float]:
    return {
        "rate_per_s": config.rate_per_s,
        "duration_s": config.duration_s,
        "hang_at_s": config.hang_at_s,
        "processing_ms": config.processing_ms,
        "max_cache": config.max_cache,
        "consumers": len(NAMES),
        "queues": 2,
    }


if __name__ == "__main__":
    main()
