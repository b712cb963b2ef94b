"""Store throughput: appends and reads against the disk's own ceiling, in one run.

Cases (1 KiB bodies, bounded by count and by time):

* ``append_single_{async,sync}``   one message per append call;
* ``append_batch32_{async,sync}``  32 messages per append call;
* ``append_concurrent8_sync``      8 concurrent single-message appenders (group commit);
* ``read_batch32``                 sequential reads of 32 messages per call.

Ceilings measured on the same directory in the same run:

* ``raw_write_fsync_periodic``  sequential 1 KiB writes with an fsync every 500 ms
  (what ASYNC mode could at best reach);
* ``raw_fsync_rate``            fsyncs per second after a 1 KiB write each (the
  bound for one-message SYNC appends without group commit).

Ratios in the JSON compare each case with its ceiling. Run: ``make bench`` or
``python -m bench.store_throughput [--repeats 3] [--seconds 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench import common
from popbroker.store.api import FlushMode, MessageToAppend, TopicConfig
from popbroker.store.local import LocalStore
from popbroker.store.settings import StoreSettings

BODY = b"x" * 1024
MIB = 1024 * 1024


def _settings(mode: FlushMode) -> StoreSettings:
    return StoreSettings(flush_mode=mode, segment_bytes=64 * MIB, flush_interval_ms=500)


async def _timed(
    step: Callable[[], Awaitable[int]], *, seconds: float, max_messages: int
) -> dict[str, float]:
    done, started = 0, time.perf_counter()
    deadline = started + seconds
    while done < max_messages and time.perf_counter() < deadline:
        done += await step()
    elapsed = time.perf_counter() - started
    return {"messages": done, "seconds": elapsed, "msgs_per_s": done / elapsed}


async def _append_case(root: Path, mode: FlushMode, batch: int, seconds: float) -> dict[str, float]:
    store = LocalStore.open(root, _settings(mode))
    try:
        await store.put_topic(TopicConfig("bench", 4, 4))
        counter = 0

        async def step() -> int:
            nonlocal counter
            counter += 1
            msgs = [MessageToAppend("bench", counter % 4, BODY) for _ in range(batch)]
            await store.append(msgs)
            return batch

        return await _timed(step, seconds=seconds, max_messages=2_000_000)
    finally:
        await store.close()


async def _concurrent_case(root: Path, seconds: float, writers: int = 8) -> dict[str, float]:
    store = LocalStore.open(root, _settings(FlushMode.SYNC))
    try:
        await store.put_topic(TopicConfig("bench", 4, 4))
        fsyncs_before = len(store.flusher.flush_latencies_ms)
        deadline = time.perf_counter() + seconds
        started = time.perf_counter()

        async def writer(n: int) -> int:
            count = 0
            while time.perf_counter() < deadline and count < 200_000:
                await store.append([MessageToAppend("bench", n % 4, BODY)])
                count += 1
            return count

        counts = await asyncio.gather(*(writer(n) for n in range(writers)))
        elapsed = time.perf_counter() - started
        total = sum(counts)
        fsyncs = len(store.flusher.flush_latencies_ms) - fsyncs_before
        return {
            "messages": total,
            "seconds": elapsed,
            "msgs_per_s": total / elapsed,
            "appends_per_fsync": total / max(fsyncs, 1),
        }
    finally:
        await store.close()


async def _read_case(root: Path, seconds: float) -> dict[str, float]:
    store = LocalStore.open(root, _settings(FlushMode.ASYNC))
    try:
        await store.put_topic(TopicConfig("bench", 1, 1))
        total = 20_000
        for _ in range(0, total, 256):
            await store.append([MessageToAppend("bench", 0, BODY) for _ in range(256)])
        offset = 0

        async def step() -> int:
            nonlocal offset
            result = await store.read("bench", 0, offset, max_count=32)
            offset = result.next_queue_offset if result.messages else 0
            return len(result.messages)

        return await _timed(step, seconds=seconds, max_messages=5_000_000)
    finally:
        await store.close()


def _raw_write_periodic_fsync(root: Path, seconds: float) -> dict[str, float]:
    path = root / "raw"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        done, position = 0, 0
        started = time.perf_counter()
        last_sync = started
        deadline = started + seconds
        while time.perf_counter() < deadline and position < 2 * 1024 * MIB:
            os.pwrite(fd, BODY, position)
            position += len(BODY)
            done += 1
            now = time.perf_counter()
            if now - last_sync >= 0.5:
                os.fdatasync(fd)
                last_sync = now
        os.fdatasync(fd)
        elapsed = time.perf_counter() - started
    finally:
        os.close(fd)
        path.unlink()
    return {"messages": done, "seconds": elapsed, "msgs_per_s": done / elapsed}


def _raw_fsync_rate(root: Path, seconds: float) -> dict[str, float]:
    path = root / "fsync"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        done, position = 0, 0
        started = time.perf_counter()
        deadline = started + seconds
        while time.perf_counter() < deadline and done < 1_000_000:
            os.pwrite(fd, BODY, position)
            position += len(BODY)
            os.fdatasync(fd)
            done += 1
        elapsed = time.perf_counter() - started
    finally:
        os.close(fd)
        path.unlink()
    return {"messages": done, "seconds": elapsed, "msgs_per_s": done / elapsed}


async def _one_round(base: Path, seconds: float) -> dict[str, dict[str, float]]:
    cases: dict[str, dict[str, float]] = {}
    for mode in (FlushMode.ASYNC, FlushMode.SYNC):
        for batch in (1, 32):
            name = f"append_{'single' if batch == 1 else 'batch32'}_{mode.value}"
            cases[name] = await _append_case(base / name, mode, batch, seconds)
    cases["append_concurrent8_sync"] = await _concurrent_case(base / "conc", seconds)
    cases["read_batch32"] = await _read_case(base / "read", seconds)
    cases["raw_write_fsync_periodic"] = _raw_write_periodic_fsync(base, seconds)
    cases["raw_fsync_rate"] = _raw_fsync_rate(base, seconds)
    return cases


def run(*, repeats: int = 3, seconds: float = 3.0, directory: Path | None = None) -> dict[str, Any]:
    rounds = []
    for i in range(repeats):
        with tempfile.TemporaryDirectory(dir=directory, prefix="popfleet-bench-") as tmp:
            rounds.append(asyncio.run(_one_round(Path(tmp), seconds)))
            print(
                f"round {i + 1}/{repeats}: "
                + ", ".join(f"{k}={v['msgs_per_s']:.0f}/s" for k, v in rounds[-1].items())
            )
    medians = {case: common.median([r[case]["msgs_per_s"] for r in rounds]) for case in rounds[0]}
    ceiling_async = medians["raw_write_fsync_periodic"]
    ceiling_sync = medians["raw_fsync_rate"]
    ratios = {
        "append_single_async/raw_write": medians["append_single_async"] / ceiling_async,
        "append_batch32_async/raw_write": medians["append_batch32_async"] / ceiling_async,
        "append_single_sync/raw_fsync": medians["append_single_sync"] / ceiling_sync,
        "append_batch32_sync/raw_fsync": medians["append_batch32_sync"] / ceiling_sync,
        "append_concurrent8_sync/raw_fsync": medians["append_concurrent8_sync"] / ceiling_sync,
    }
    return {
        "unit": "messages/s (1 KiB bodies)",
        "repeats": repeats,
        "seconds_per_case": seconds,
        "median_msgs_per_s": medians,
        "ratios": ratios,
        "rounds": rounds,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--dir", type=Path, default=None, help="where to put scratch stores")
    args = parser.parse_args()
    result = run(repeats=args.repeats, seconds=args.seconds, directory=args.dir)
    path = common.write("store_throughput", result)
    for case, value in result["median_msgs_per_s"].items():
        print(f"{case:32s} {value:12.0f} msgs/s (median of {args.repeats})")
    for ratio, value in result["ratios"].items():
        print(f"{ratio:40s} {value:8.3f}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
