"""Store wire mechanism: what one call from another role costs, by mechanism.

The measurement behind ``docs/design/2026-11-21-store-wire.md``. Two operations:

* ``info``    a small call (``StoreApi.info``: no disk access, ~60 bytes answer);
* ``read32``  ``read(max_count=32)`` of 1 KiB bodies, the POP batch size
  (~33 KiB answer), cycling through 2,048 messages that sit in the page cache;

and, for the write path, ``append32`` (32 x 1 KiB, async flush) where it applies.
Mechanisms:

* ``inproc``     ``await LocalStore.<op>`` in this process (no hop at all);
* ``grpc_uds``   ``RemoteStore`` -> a store process, gRPC over a Unix socket;
* ``grpc_tcp``   the same over TCP on 127.0.0.1 (the pod-IP alternative);
* ``frames_uds`` ``RemoteStore`` -> the same store process, its unary calls framed
  (:mod:`popbroker.store.wire.frames`: length-prefixed frames on the store's second
  Unix socket, the same protobuf messages, no HTTP/2), what the roles use since
  2026-11-28 (``docs/design/2026-11-28-store-frames.md``);
* ``pread``      the reader opens the store's files itself (the "read-only mmap of
  segments" alternative): one pread of the consume-queue entries, one per record,
  full record decode and CRC check into ``StoredMessage`` values (``info`` here is
  one 20-byte consume-queue pread, the cheapest file-based lookup);
* ``mmap``       the same reads through read-only ``mmap`` slices;
* ``codec``      no transport: only converting the answer to protobuf, serialising,
  parsing and converting back (the part of any protobuf protocol that stays).

``*_c8`` cases run 8 concurrent callers on one client (calls in flight at once).

Every store process works on its own copy of the same data, so all run at once
and each round visits every case; rounds are repeated and the JSON keeps each
round and the median of rounds. Loops are bounded by count and by time. The
machine's load average is recorded before and after: on a shared 2-core machine
the figures move with whatever else runs.

Run: ``make bench`` or ``python -m bench.store_wire [--repeats 3] [--seconds 1.5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import mmap
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench import common
from popbroker.roles import store as store_role
from popbroker.store import api
from popbroker.store import format as fmt
from popbroker.store.local import LocalStore
from popbroker.store.settings import StoreSettings
from popbroker.store.wire import convert
from popbroker.store.wire import store_pb2 as pb
from popbroker.store.wire.client import RemoteStore

TOPIC = "bench"
BODY = b"x" * 1024
BATCH = 32
MESSAGES = 2048
WARMUP_CALLS = 200
READY_TIMEOUT_S = 30.0

Call = Callable[[], Awaitable[object]]

# ---------------------------------------------------------------- direct file reads


class DirectReader:
    """Reads a store's files the way a reader with read-only segment access would."""

    def __init__(self, data_dir: Path) -> None:
        (cq_file,) = sorted((data_dir / "consumequeue" / TOPIC / "0").iterdir())
        (log_file,) = sorted((data_dir / "commitlog").iterdir())
        self._cq_fd = os.open(cq_file, os.O_RDONLY)
        self._log_fd = os.open(log_file, os.O_RDONLY)
        self._cq_map = mmap.mmap(self._cq_fd, 0, prot=mmap.PROT_READ)
        self._log_map = mmap.mmap(self._log_fd, 0, prot=mmap.PROT_READ)

    def entry_pread(self, queue_offset: int) -> tuple[int, int, int]:
        raw = os.pread(self._cq_fd, fmt.CQ_ENTRY_SIZE, queue_offset * fmt.CQ_ENTRY_SIZE)
        return fmt.decode_cq_entry(raw)

    def entry_mmap(self, queue_offset: int) -> tuple[int, int, int]:
        at = queue_offset * fmt.CQ_ENTRY_SIZE
        return fmt.decode_cq_entry(self._cq_map[at : at + fmt.CQ_ENTRY_SIZE])

    def read_pread(self, queue_offset: int) -> list[api.StoredMessage]:
        raw = os.pread(self._cq_fd, BATCH * fmt.CQ_ENTRY_SIZE, queue_offset * fmt.CQ_ENTRY_SIZE)
        out = []
        for i in range(BATCH):
            physical, size, _ = fmt.decode_cq_entry(raw, i * fmt.CQ_ENTRY_SIZE)
            record = os.pread(self._log_fd, size, physical)
            out.append(_stored(fmt.decode_record(record, expected_physical_offset=physical)))
        return out

    def read_mmap(self, queue_offset: int) -> list[api.StoredMessage]:
        out = []
        base = queue_offset * fmt.CQ_ENTRY_SIZE
        entries = self._cq_map[base : base + BATCH * fmt.CQ_ENTRY_SIZE]
        for i in range(BATCH):
            physical, size, _ = fmt.decode_cq_entry(entries, i * fmt.CQ_ENTRY_SIZE)
            record = self._log_map[physical : physical + size]
            out.append(_stored(fmt.decode_record(record, expected_physical_offset=physical)))
        return out

    def close(self) -> None:
        self._cq_map.close()
        self._log_map.close()
        os.close(self._cq_fd)
        os.close(self._log_fd)


def _stored(record: fmt.Record) -> api.StoredMessage:
    return api.StoredMessage(
        topic=record.topic,
        queue_id=record.queue_id,
        queue_offset=record.queue_offset,
        physical_offset=record.physical_offset,
        body=record.body,
        properties=record.properties,
        born_timestamp_ms=record.born_timestamp_ms,
        store_timestamp_ms=record.store_timestamp_ms,
        born_host=record.born_host,
        reconsume_times=record.reconsume_times,
        flags=record.flags,
    )


# ---------------------------------------------------------------- measuring


class Offsets:
    """Cycles read positions through the prepared messages."""

    def __init__(self) -> None:
        self._next = 0

    def __call__(self) -> int:
        at = self._next
        self._next = (self._next + BATCH) % (MESSAGES - BATCH + 1)
        return at


async def measure(
    call: Call, *, seconds: float, max_calls: int, concurrency: int = 1
) -> dict[str, float]:
    """Per-call latencies of ``call`` for at most ``seconds`` and ``max_calls`` calls."""
    for _ in range(min(WARMUP_CALLS, max_calls)):
        await call()
    latencies_ns: list[int] = []
    started = time.perf_counter()
    deadline = started + seconds

    async def worker() -> None:
        while len(latencies_ns) < max_calls and time.perf_counter() < deadline:
            t0 = time.perf_counter_ns()
            await call()
            latencies_ns.append(time.perf_counter_ns() - t0)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    ordered = sorted(latencies_ns)
    return {
        "calls": len(ordered),
        "seconds": round(elapsed, 4),
        "calls_per_s": round(len(ordered) / elapsed, 1),
        "median_us": round(statistics.median(ordered) / 1000, 2),
        "p99_us": round(ordered[int(len(ordered) * 0.99) - 1] / 1000, 2),
    }


def _settings() -> StoreSettings:
    return StoreSettings(segment_bytes=64 * 1024 * 1024, flush_interval_ms=500)


async def _prepare(data_dir: Path) -> None:
    store = LocalStore.open(data_dir, _settings())
    try:
        await store.put_topic(api.TopicConfig(TOPIC, 1, 1))
        await store.put_topic(api.TopicConfig("scratch", 1, 1))
        for _ in range(MESSAGES // BATCH):
            await store.append([api.MessageToAppend(TOPIC, 0, BODY) for _ in range(BATCH)])
    finally:
        await store.close()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _start(argv: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(10)


def _append_call(store: api.StoreApi) -> Call:
    batch = [api.MessageToAppend("scratch", 0, BODY) for _ in range(BATCH)]

    async def call() -> object:
        return await store.append(batch)

    return call


def _read_call(store: api.StoreApi) -> Call:
    offsets = Offsets()

    async def call() -> object:
        result = await store.read(TOPIC, 0, offsets(), max_count=BATCH)
        assert len(result.messages) == BATCH
        return result

    return call


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="pf-wire-", dir="/tmp"))
    processes: list[subprocess.Popen[bytes]] = []
    opened: list[Callable[[], Awaitable[None]]] = []
    try:
        await _prepare(root / "data")
        shutil.copytree(root / "data", root / "data-grpc")
        port = _free_port()
        processes.append(
            _start(
                [
                    "-m",
                    "popbroker.roles.store",
                    "--data-dir",
                    str(root / "data-grpc"),
                    "--socket",
                    str(root / "grpc.sock"),
                    "--listen",
                    f"127.0.0.1:{port}",
                    "--settings-json",
                    store_role.settings_to_json(_settings()),
                    "--log-level",
                    "WARNING",
                ]
            )
        )
        local = LocalStore.open(root / "data", _settings())
        opened.append(local.close)
        uds = RemoteStore.connect(f"unix:{root / 'grpc.sock'}", frames_allowed=False)
        opened.append(uds.close)
        tcp = RemoteStore.connect(f"127.0.0.1:{port}")
        opened.append(tcp.close)
        framed = RemoteStore.connect(f"unix:{root / 'grpc.sock'}")
        opened.append(framed.close)
        await uds.wait_ready(READY_TIMEOUT_S)
        await tcp.wait_ready(READY_TIMEOUT_S)
        await framed.wait_ready(READY_TIMEOUT_S)
        if not framed.framed:
            raise RuntimeError("the store process serves no framed calls")
        direct = DirectReader(root / "data")

        async def direct_info_pread() -> object:
            return direct.entry_pread(MESSAGES - 1)

        async def direct_info_mmap() -> object:
            return direct.entry_mmap(MESSAGES - 1)

        pread_offsets, mmap_offsets = Offsets(), Offsets()

        async def direct_read_pread() -> object:
            return direct.read_pread(pread_offsets())

        async def direct_read_mmap() -> object:
            return direct.read_mmap(mmap_offsets())

        sample_info = await local.info()
        sample_read = await local.read(TOPIC, 0, 0, max_count=BATCH)

        async def info_codec() -> object:
            wire = convert.info_to_pb(sample_info).SerializeToString()
            return convert.info_from_pb(pb.StoreInfo.FromString(wire))

        async def read_codec() -> object:
            wire = convert.read_result_to_pb(sample_read).SerializeToString()
            return convert.read_result_from_pb(pb.ReadResponse.FromString(wire))

        cases: dict[str, tuple[Call, int]] = {
            "info/inproc": (local.info, 1),
            "info/codec": (info_codec, 1),
            "info/grpc_uds": (uds.info, 1),
            "info/grpc_tcp": (tcp.info, 1),
            "info/frames_uds": (framed.info, 1),
            "info/pread": (direct_info_pread, 1),
            "info/mmap": (direct_info_mmap, 1),
            "info/grpc_uds_c8": (uds.info, 8),
            "info/frames_uds_c8": (framed.info, 8),
            "read32/inproc": (_read_call(local), 1),
            "read32/codec": (read_codec, 1),
            "read32/grpc_uds": (_read_call(uds), 1),
            "read32/grpc_tcp": (_read_call(tcp), 1),
            "read32/frames_uds": (_read_call(framed), 1),
            "read32/pread": (direct_read_pread, 1),
            "read32/mmap": (direct_read_mmap, 1),
            "read32/grpc_uds_c8": (_read_call(uds), 8),
            "read32/frames_uds_c8": (_read_call(framed), 8),
            "append32/inproc": (_append_call(local), 1),
            "append32/grpc_uds": (_append_call(uds), 1),
            "append32/frames_uds": (_append_call(framed), 1),
            "append32/grpc_uds_c4": (_append_call(uds), 4),
            "append32/frames_uds_c4": (_append_call(framed), 4),
        }
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in cases}
        load_before = os.getloadavg()
        for _ in range(args.repeats):
            for name, (call, concurrency) in cases.items():
                max_calls = args.max_calls if not name.startswith("append") else 2_000
                runs[name].append(
                    await measure(
                        call, seconds=args.seconds, max_calls=max_calls, concurrency=concurrency
                    )
                )
        load_after = os.getloadavg()
        direct.close()
    finally:
        for close in reversed(opened):
            await close()
        for process in processes:
            _stop(process)
        shutil.rmtree(root, ignore_errors=True)
    return _summary(runs, args, load_before, load_after)


def _summary(
    runs: dict[str, list[dict[str, float]]],
    args: argparse.Namespace,
    load_before: tuple[float, float, float],
    load_after: tuple[float, float, float],
) -> dict[str, Any]:
    cases: dict[str, Any] = {}
    for name, rounds in runs.items():
        cases[name] = {
            "median_us": round(common.median([r["median_us"] for r in rounds]), 2),
            "p99_us": round(common.median([r["p99_us"] for r in rounds]), 2),
            "calls_per_s": round(common.median([r["calls_per_s"] for r in rounds]), 1),
            "runs": rounds,
        }

    def ratio(a: str, b: str) -> float:
        return round(float(cases[a]["median_us"]) / float(cases[b]["median_us"]), 2)

    ratios = {
        f"{op}/{mech}_vs_{base}": ratio(f"{op}/{mech}", f"{op}/{base}")
        for op in ("info", "read32")
        for mech, base in (
            ("grpc_uds", "inproc"),
            ("grpc_tcp", "grpc_uds"),
            ("grpc_uds", "frames_uds"),
            ("frames_uds", "inproc"),
            ("pread", "inproc"),
            ("grpc_uds", "pread"),
        )
    }
    for mech, base in (
        ("grpc_uds", "inproc"),
        ("frames_uds", "inproc"),
        ("grpc_uds", "frames_uds"),
        ("grpc_uds_c4", "frames_uds_c4"),
    ):
        ratios[f"append32/{mech}_vs_{base}"] = ratio(f"append32/{mech}", f"append32/{base}")
    return {
        "params": {
            "seconds_per_case": args.seconds,
            "repeats": args.repeats,
            "max_calls": args.max_calls,
            "batch": BATCH,
            "body_bytes": len(BODY),
            "messages": MESSAGES,
        },
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "cases": cases,
        "ratios": ratios,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.store_wire")
    parser.add_argument("--seconds", type=float, default=1.5, help="per case and round")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-calls", type=int, default=20_000, help="per case and round")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    result = asyncio.run(_run(args))
    path = common.write("store_wire", result)
    width = max(len(n) for n in result["cases"])
    for name, case in result["cases"].items():
        print(
            f"{name:<{width}}  median {case['median_us']:>9.1f} us"
            f"  p99 {case['p99_us']:>9.1f} us  {case['calls_per_s']:>9.0f} calls/s"
        )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
