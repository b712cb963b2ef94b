"""The four measurements of the peer benchmark, the same code for every system.

Each system is driven through an :class:`Adapter` (one module per system); the
drivers below only call ``send`` / ``receive`` / ``ack``. Every phase runs its
clients in separate processes (``spawn``), so a client's CPU never shares a GIL
with another client, and every loop is bounded in count and in time.

Phases (numbered as run by ``bench/pop_peers.py``):

1. **produce**: one producer process, ``inflight`` tasks, each sending batches of
   ``batch`` 1 KiB messages and awaiting the batch's acknowledgement before its
   next batch. Rate = messages / wall time.
2. **pop+ack** with ``consumers`` processes on one group over the backlog of step
   1: receive up to 32, ack them all, repeat, until the shared counter reaches the
   target. Rate = target / (moment the counter crossed it - common start).
   2b. **end to end**: the producer of step 1 and one consumer of step 2 at once on
   a fresh topic; rate = messages / time until the consumer has acked them all.
   This is the "max load" the latency step runs at half of: the isolated rates of
   steps 1 and 2 overstate what a 2-core host carries with both sides running.
3. **latency** at a fixed rate: a paced producer stamps each message with its
   *scheduled* send time (CLOCK_MONOTONIC, shared by all processes on the host; no
   coordinated omission) and sends what is due as one batch (at most 32, at most 4
   batches in flight, as in step 1); one consumer
   (receive 32 + ack) records receive time - scheduled time. The first 0.5 s are
   warm-up and dropped.
4. **redelivery**: send ``count`` messages, receive them without acking, 8 per
   receive with 37 ms between receives (so the deadlines fall at different phases
   of each system's timers and polls), noting when each receive request
   *started*; then keep receiving; each message's
   lateness = when it came back - (its receive start + invisible time). Using the
   request start makes the figure an upper bound (it includes up to one receive
   round trip).

Message body: 8-byte scheduled time in ns, 8-byte sequence, zero padding to
``BODY_BYTES``.
"""

from __future__ import annotations

import asyncio
import importlib
import math
import multiprocessing
import queue
import struct
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

BODY_BYTES = 1024
BATCH = 32
INFLIGHT = 4  # batches a producer keeps in flight (phases 1, 2b and 3)
_HEADER = struct.Struct(">qq")
WARMUP_S = 0.5
SPREAD_BATCH = 8  # redelivery: messages per first receive
SPREAD_GAP_S = 0.037  # redelivery: pause between first receives
SPAWN = multiprocessing.get_context("spawn")


def body(seq: int, stamp_ns: int) -> bytes:
    return _HEADER.pack(stamp_ns, seq).ljust(BODY_BYTES, b"\0")


def parse(data: bytes) -> tuple[int, int]:
    """(stamp_ns, seq) of a body made by :func:`body`."""
    stamp_ns, seq = _HEADER.unpack_from(data)
    return stamp_ns, seq


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100.0 * len(ordered)))
    return ordered[rank - 1]


def requirement(module: str) -> Any:
    """Import a bench-only client package, or say how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise SystemExit(
            f"bench/pop_peers.py needs {module!r}: .venv/bin/pip install -r requirements/bench.txt"
        ) from exc


@dataclass(slots=True)
class Delivered:
    """One received message: its body, what ``ack`` needs, and its delivery attempt."""

    body: bytes
    token: Any
    attempt: int = 1


@dataclass(frozen=True, slots=True)
class Spec:
    """Everything a worker process needs to build an adapter (picklable)."""

    system: str  # "nats" | "redis" | "popfleet"
    endpoint: str  # 127.0.0.1:PORT
    topic: str
    group: str
    consumer: str = "c0"
    invisible_s: float = 60.0
    reclaim_poll_s: float = 0.0  # Redis only: XAUTOCLAIM every this long (0 = never)

    def named(self, consumer: str) -> Spec:
        return Spec(
            system=self.system,
            endpoint=self.endpoint,
            topic=self.topic,
            group=self.group,
            consumer=consumer,
            invisible_s=self.invisible_s,
            reclaim_poll_s=self.reclaim_poll_s,
        )


class Adapter(Protocol):
    async def connect(self) -> None: ...
    async def send(self, bodies: Sequence[bytes]) -> None: ...
    async def receive(self, *, max_count: int, wait_s: float) -> list[Delivered]: ...
    async def ack(self, delivered: Sequence[Delivered]) -> None: ...
    async def close(self) -> None: ...


_MODULES = {
    "nats": "bench.peers.natsload",
    "redis": "bench.peers.redisload",
    "popfleet": "bench.peers.v2load",
}


def adapter(spec: Spec) -> Adapter:
    module = importlib.import_module(_MODULES[spec.system])
    made: Adapter = module.make(spec)
    return made


# -- results ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Rate:
    count: int
    elapsed_s: float
    capped: bool = False  # the time cap ended the phase before its target

    @property
    def per_s(self) -> float:
        return self.count / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "messages": self.count,
            "seconds": round(self.elapsed_s, 4),
            "msgs_per_s": round(self.per_s, 1),
            "capped": self.capped,
        }


@dataclass(slots=True)
class Latency:
    rate_per_s: float
    sent: int
    received: int
    samples_ms: list[float] = field(default_factory=list)
    # last receive - scheduled end of sending: ~0 when the system kept up with the
    # rate, the backlog's drain time when it did not (then the percentiles are queueing)
    drain_s: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "target_rate_per_s": round(self.rate_per_s, 1),
            "drain_after_end_s": round(self.drain_s, 3),
            "sent": self.sent,
            "received": self.received,
            "samples": len(self.samples_ms),
            "p50_ms": round(percentile(self.samples_ms, 50), 3),
            "p99_ms": round(percentile(self.samples_ms, 99), 3),
            "max_ms": round(max(self.samples_ms, default=0.0), 3),
        }


@dataclass(slots=True)
class Redelivery:
    invisible_s: float
    expected: int
    lateness_ms: list[float] = field(default_factory=list)
    early: int = 0  # came back before the deadline (should be 0)

    def as_json(self) -> dict[str, Any]:
        return {
            "invisible_s": self.invisible_s,
            "messages": self.expected,
            "returned": len(self.lateness_ms),
            "early": self.early,
            "p50_ms": round(percentile(self.lateness_ms, 50), 1),
            "p99_ms": round(percentile(self.lateness_ms, 99), 1),
            "max_ms": round(max(self.lateness_ms, default=0.0), 1),
            "min_ms": round(min(self.lateness_ms, default=0.0), 1),
        }


# -- process plumbing ------------------------------------------------------------------------


Job = tuple[Callable[..., Awaitable[Any]], tuple[Any, ...]]


def run_workers(jobs: Sequence[Job], *, timeout_s: float) -> list[Any]:
    """Run each ``fn(*args, results)`` in a spawned process; collect one result per job.

    Results come back as ``(job index, value)``, in job order. A worker that outlives
    ``timeout_s`` is terminated by its PID (its Process object); a worker's failure
    comes back as a string and is raised here.
    """
    results: Any = SPAWN.Queue()
    workers = [
        SPAWN.Process(target=_indexed, args=(index, fn, args, results))
        for index, (fn, args) in enumerate(jobs)
    ]
    for worker in workers:
        worker.start()
    collected: dict[int, Any] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(collected) < len(workers) and time.monotonic() < deadline:
            try:
                index, value = results.get(timeout=0.2)
                collected[index] = value
            except queue.Empty:
                if all(not w.is_alive() for w in workers) and results.empty():
                    break
    finally:
        for worker in workers:
            worker.join(timeout=max(0.1, deadline - time.monotonic()))
            if worker.is_alive():
                worker.terminate()
                worker.join(timeout=5)
    for value in collected.values():
        if isinstance(value, str):
            raise RuntimeError("worker failed: " + value)
    if len(collected) < len(workers):
        raise RuntimeError(f"{len(workers) - len(collected)} worker(s) gave no result")
    return [collected[i] for i in range(len(workers))]


def _indexed(index: int, fn: Callable[..., Any], args: tuple[Any, ...], results: Any) -> None:
    """Worker entry: run the coroutine function ``fn(*args)``, report ``(index, value)``."""
    results.put((index, _guarded(fn, *args)))


def _guarded(coro_fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return asyncio.run(coro_fn(*args))
    except Exception as exc:  # noqa: BLE001 - a worker reports every failure to its parent
        return f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-4)}"


# -- 1. produce ------------------------------------------------------------------------------


async def _produce(
    spec: Spec, count: int, inflight: int, cap_s: float, barrier: Any = None
) -> tuple[int, float, bool]:
    client = adapter(spec)
    await client.connect()
    try:
        if barrier is not None:
            await asyncio.to_thread(barrier.wait, 60)
        next_seq = 0
        sent = 0
        started = time.monotonic()
        deadline = started + cap_s

        async def lane() -> None:
            nonlocal next_seq, sent
            while next_seq < count and time.monotonic() < deadline:
                first = next_seq
                n = min(BATCH, count - first)
                next_seq += n
                now = time.monotonic_ns()
                await client.send([body(first + i, now) for i in range(n)])
                sent += n

        await asyncio.gather(*(lane() for _ in range(inflight)))
        elapsed = time.monotonic() - started
        return sent, elapsed, sent < count
    finally:
        await client.close()


def produce(spec: Spec, *, count: int, inflight: int = INFLIGHT, cap_s: float = 60.0) -> Rate:
    """Phase 1 (see the module doc)."""
    [result] = run_workers([(_produce, (spec, count, inflight, cap_s))], timeout_s=cap_s + 60)
    sent, elapsed, capped = result
    return Rate(sent, elapsed, capped)


# -- 2. pop + ack ----------------------------------------------------------------------------


async def _consume(
    spec: Spec, target: int, counter: Any, finish: Any, barrier: Any, cap_s: float
) -> tuple[float, int]:
    client = adapter(spec)
    await client.connect()
    try:
        await asyncio.to_thread(barrier.wait, 60)
        started = time.monotonic()
        deadline = started + cap_s
        mine = 0
        while time.monotonic() < deadline:
            with counter.get_lock():
                if counter.value >= target:
                    break
            got = await client.receive(max_count=BATCH, wait_s=1.0)
            if not got:
                continue
            await client.ack(got)
            mine += len(got)
            with counter.get_lock():
                before = counter.value
                counter.value += len(got)
                if before < target <= counter.value:
                    finish.value = time.monotonic()
        return started, mine
    finally:
        await client.close()


def pop_ack(spec: Spec, *, target: int, consumers: int, cap_s: float = 60.0) -> Rate:
    """Phase 2 (see the module doc)."""
    counter = SPAWN.Value("q", 0)
    finish = SPAWN.Value("d", 0.0)
    barrier = SPAWN.Barrier(consumers)
    jobs: list[Job] = [
        (_consume, (spec.named(f"c{i}"), target, counter, finish, barrier, cap_s))
        for i in range(consumers)
    ]
    results = run_workers(jobs, timeout_s=cap_s + 90)
    started = min(r[0] for r in results)
    done = sum(r[1] for r in results)
    if finish.value > 0:
        return Rate(target, finish.value - started)
    return Rate(done, cap_s, capped=True)


def end_to_end(spec: Spec, *, count: int, inflight: int = INFLIGHT, cap_s: float = 60.0) -> Rate:
    """Phase 2b: producer (as in phase 1) and one consumer (as in phase 2) at once.

    Rate = count / (moment the consumer's counter reached ``count`` - common start):
    the most the system carries with both sides running, which sets phase 3's rate.
    """
    counter = SPAWN.Value("q", 0)
    finish = SPAWN.Value("d", 0.0)
    barrier = SPAWN.Barrier(2)
    _produced, (started, done) = run_workers(
        [
            (_produce, (spec.named("e2e-producer"), count, inflight, cap_s, barrier)),
            (_consume, (spec.named("e2e-consumer"), count, counter, finish, barrier, cap_s)),
        ],
        timeout_s=cap_s + 90,
    )
    if finish.value > 0:
        return Rate(count, finish.value - started)
    return Rate(int(done), cap_s, capped=True)


# -- 3. latency ------------------------------------------------------------------------------


async def _paced_producer(
    spec: Spec, rate: float, duration_s: float, sent_total: Any, barrier: Any
) -> int:
    client = adapter(spec)
    await client.connect()
    try:
        await asyncio.to_thread(barrier.wait, 60)
        start_ns = time.monotonic_ns()
        interval_ns = 1e9 / rate
        total = int(rate * duration_s)
        seq = 0
        hard_stop = time.monotonic() + duration_s * 3 + 10
        slots = asyncio.Semaphore(INFLIGHT)
        pending: set[asyncio.Task[None]] = set()

        async def send(bodies: list[bytes]) -> None:
            try:
                await client.send(bodies)
            finally:
                slots.release()

        while seq < total and time.monotonic() < hard_stop:
            now_ns = time.monotonic_ns()
            due = min(total, int((now_ns - start_ns) / interval_ns) + 1)
            if due <= seq:
                await asyncio.sleep((start_ns + seq * interval_ns - now_ns) / 1e9)
                continue
            await slots.acquire()  # at most INFLIGHT batches in flight, as in phase 1
            due = min(total, int((time.monotonic_ns() - start_ns) / interval_ns) + 1)
            n = min(BATCH, due - seq)
            task = asyncio.create_task(
                send([body(seq + i, int(start_ns + (seq + i) * interval_ns)) for i in range(n)])
            )
            pending.add(task)
            task.add_done_callback(pending.discard)
            seq += n
            sent_total.value = seq
        await asyncio.gather(*pending)
        return seq
    finally:
        await client.close()


async def _timed_consumer(
    spec: Spec, duration_s: float, sent_total: Any, barrier: Any
) -> tuple[int, list[float], float]:
    client = adapter(spec)
    await client.connect()
    try:
        await asyncio.to_thread(barrier.wait, 60)
        start_ns = time.monotonic_ns()
        warm_ns = start_ns + int(WARMUP_S * 1e9)
        samples: list[float] = []
        received = 0
        deadline = time.monotonic() + duration_s + 10
        producer_done_at: float | None = None
        last_ns = start_ns
        while time.monotonic() < deadline:
            got = await client.receive(max_count=BATCH, wait_s=1.0)
            now_ns = time.monotonic_ns()
            if got:
                last_ns = now_ns
            for delivered in got:
                stamp_ns, _ = parse(delivered.body)
                if stamp_ns >= warm_ns:
                    samples.append((now_ns - stamp_ns) / 1e6)
            if got:
                await client.ack(got)
                received += len(got)
            expected = int(sent_total.value)
            finished = time.monotonic() - start_ns / 1e9 >= duration_s
            if finished and received >= expected > 0:
                break
            if finished and producer_done_at is None:
                producer_done_at = time.monotonic()
            if producer_done_at is not None and time.monotonic() - producer_done_at > 5:
                break  # bounded drain after the producer's run
        return received, samples, (last_ns - start_ns) / 1e9 - duration_s
    finally:
        await client.close()


def latency(spec: Spec, *, rate: float, duration_s: float = 5.0) -> Latency:
    """Phase 3 (see the module doc)."""
    sent_total = SPAWN.Value("q", 0)
    barrier = SPAWN.Barrier(2)
    sent, (received, samples, tail_s) = run_workers(
        [
            (_paced_producer, (spec.named("lat-producer"), rate, duration_s, sent_total, barrier)),
            (_timed_consumer, (spec.named("lat-consumer"), duration_s, sent_total, barrier)),
        ],
        timeout_s=duration_s * 3 + 90,
    )
    return Latency(rate, int(sent), int(received), list(samples), float(tail_s))


# -- 4. redelivery ---------------------------------------------------------------------------


async def _redeliver(spec: Spec, count: int, cap_s: float) -> tuple[list[float], int]:
    client = adapter(spec)
    await client.connect()
    try:
        for first in range(0, count, BATCH):
            n = min(BATCH, count - first)
            await client.send([body(first + i, time.monotonic_ns()) for i in range(n)])
        deadline_of: dict[int, float] = {}
        stop = time.monotonic() + cap_s
        while len(deadline_of) < count and time.monotonic() < stop:
            asked = time.monotonic()
            for delivered in await client.receive(max_count=SPREAD_BATCH, wait_s=1.0):
                _, seq = parse(delivered.body)
                deadline_of.setdefault(seq, asked + spec.invisible_s)
            await asyncio.sleep(SPREAD_GAP_S)
        lateness: list[float] = []
        early = 0
        seen: set[int] = set()
        while len(seen) < len(deadline_of) and time.monotonic() < stop:
            got = await client.receive(max_count=BATCH, wait_s=1.0)
            now = time.monotonic()
            for delivered in got:
                _, seq = parse(delivered.body)
                if seq in seen or seq not in deadline_of:
                    continue
                seen.add(seq)
                late_ms = (now - deadline_of[seq]) * 1000.0
                if late_ms < 0:
                    early += 1
                lateness.append(late_ms)
            if got:
                await client.ack(got)
        return lateness, early
    finally:
        await client.close()


def redelivery(spec: Spec, *, count: int = 64, cap_s: float = 30.0) -> Redelivery:
    """Phase 4 (see the module doc)."""
    [result] = run_workers([(_redeliver, (spec, count, cap_s))], timeout_s=cap_s + 60)
    lateness, early = result
    return Redelivery(spec.invisible_s, count, list(lateness), early)
