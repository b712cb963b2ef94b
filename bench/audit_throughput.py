"""Audit throughput: revive-log records scanned and joined per second on Spark ``local[2]``.

What is measured: a headline case of ``--records`` (1M) records in one broker's 8
revive queues, and a broker series: ``--scaling-records`` (300k) records in each of
1, 2 and 3 brokers (one admin server process each; one data-source partition per
(broker, revive queue); ``local[2]`` runs two at a time):

* ``scan``: ``spark.read.format("popfleet")`` of the ``revive_log`` table,
  counted -- admin-API streaming scans into Spark rows;
* ``scan_join``: the audit's work as the job does it: the ``revive_keys`` table (the
  same scan with the CK/ACK matching done per revive-queue partition as it is read),
  cached, through the revive backlog transforms (per-CK states, per-group report),
  collected. A warm-up on the first records of each queue comes first (Python
  workers, imports, the JVM's code generation).

The headline runs for each revive-log transfer of the data source, side by side:
``batches`` (the default: ``ScanReviveLogBatches``, Arrow record batches handed to
Spark as they are) and ``records`` (the older path: ``ScanReviveLog``, one Python
tuple per record, also the fallback for brokers without the batch RPC). Each
case also records the time of the broker's first and second ``GetReviveStats``
(incremental since issue 16: the second reads only new records) and the load
average (1, 5, 15 min) when it started; figures taken at a 1-minute load above
1.5 are indicative only.

The records are honest revive-log records: checkpoints of 8 messages each and
one ACK record per checkpoint acking half of them, encoded by the broker's own
record codec and appended straight into a broker store (``LocalStore``, the
store API) with the wanted number of revive queues, by a child process per broker
(``python -m bench.audit_throughput serve ...``) that then serves that open
store's admin API on 127.0.0.1; the audit reads it like a live broker. Bounded
by the record count; each case runs ``--repeats`` (3) times, the median is
reported. Nothing asserts a timing. Run: ``make bench`` or ``python -m
bench.audit_throughput [--records N] [--queues 8] [--brokers 1,2,3]
[--scaling-records N, 0 = no broker series] [--transfers batches,records]
[--repeats 3]``; JSON to bench/results/audit_throughput.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import common
from popbroker.admin.server import serve_admin
from popbroker.pop import checkpoints, records
from popbroker.store import names
from popbroker.store.api import PROPERTY_TAGS, MessageToAppend
from popbroker.store.local import LocalStore
from popbroker.store.settings import StoreSettings

CLUSTER = "bench"
BROKER = "broker-0"
MESSAGES_PER_CK = 8
BATCH = 1_000
GROUPS = 16
WARM_UP_RECORDS = 2_000  # per revive queue
START_TIMEOUT_S = 1_200.0  # includes generating up to 1M records on a loaded machine


def _settings(revive_queues: int, broker_name: str = BROKER) -> StoreSettings:
    return StoreSettings(
        cluster=CLUSTER,
        broker_name=broker_name,
        revive_queue_num=revive_queues,
        segment_bytes=256 * 1024 * 1024,
    )


def _records(
    index: int, revive_queues: int, now_ms: int, broker_name: str = BROKER
) -> list[tuple[int, records.EncodedRecord]]:
    """CK ``index`` and its ACK (half the messages), in the CK's revive queue."""
    revive_queue_id = index % revive_queues
    start = (index // revive_queues) * MESSAGES_PER_CK
    offsets = tuple(range(start, start + MESSAGES_PER_CK))
    ck = checkpoints.from_queue_offsets(
        offsets,
        topic="orders",
        group=f"group-{index % GROUPS}",
        queue_id=revive_queue_id,
        start_queue_offset=start,
        pop_time_ms=now_ms - (index % 600) * 1_000,
        invisible_ms=60_000,
        revive_queue_id=revive_queue_id,
        broker_name=broker_name,
    )
    ack = records.ack_for(ck.key, offsets[::2])
    return [(revive_queue_id, records.encode(ck)), (revive_queue_id, records.encode(ack))]


async def _generate(
    store: LocalStore, revive_queues: int, total_records: int, broker_name: str = BROKER
) -> float:
    topic = names.revive_topic(CLUSTER)
    now_ms = int(time.time() * 1000)
    started = time.perf_counter()
    pending: list[MessageToAppend] = []
    for index in range(total_records // 2):
        for queue, encoded in _records(index, revive_queues, now_ms, broker_name):
            pending.append(
                MessageToAppend(
                    topic=topic,
                    queue_id=queue,
                    body=encoded.body,
                    properties={PROPERTY_TAGS: encoded.tag},
                )
            )
        if len(pending) >= BATCH:
            await store.append(pending)
            pending = []
    if pending:
        await store.append(pending)
    return time.perf_counter() - started


async def _serve(
    data_dir: Path, revive_queues: int, total_records: int, ready_file: Path, broker_name: str
) -> None:
    """Generate the records into a fresh store, then serve its admin API until SIGTERM."""
    store = LocalStore.open(data_dir, _settings(revive_queues, broker_name))
    generate_s = await _generate(store, revive_queues, total_records, broker_name)
    server = await serve_admin(store, listen="127.0.0.1:0")
    tmp = ready_file.with_suffix(".tmp")
    tmp.write_text(f"{server.port} {generate_s}")
    tmp.replace(ready_file)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await server.stop(None)
    await store.close()


def _start_server(
    data_dir: Path, revive_queues: int, total_records: int, broker_name: str = BROKER
) -> tuple[subprocess.Popen[bytes], str, float]:
    ready_file = data_dir.parent / f"ready-{broker_name}"
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.audit_throughput", "serve", "--data-dir", str(data_dir),
         "--revive-queues", str(revive_queues), "--records", str(total_records),
         "--ready-file", str(ready_file), "--broker-name", broker_name],
    )  # fmt: skip
    deadline = time.monotonic() + START_TIMEOUT_S
    while not ready_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("the bench's admin server did not start (generation too slow?)")
        time.sleep(0.1)
    port, generate_s = ready_file.read_text().split()
    return proc, f"127.0.0.1:{port}", float(generate_s)


def _stop_server(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)


def _revive_stats_s(target: str) -> list[float]:
    """Seconds of two GetReviveStats calls in a row (the second after the broker's cache)."""
    from popfleet_api.client import BrokerAdmin  # noqa: PLC0415

    async def twice() -> list[float]:
        took = []
        async with BrokerAdmin(target, timeout_s=600.0) as admin:
            for _ in range(2):
                started = time.perf_counter()
                await admin.revive_stats()
                took.append(time.perf_counter() - started)
                await asyncio.sleep(1.1)  # StorePopState caches an answer for 1 s: ask afresh
        return took

    return asyncio.run(twice())


def _warm_up_join(spark: Any, target: str, transfer: str) -> None:
    """The join once on the first records of each revive queue: the JVM compiles its code
    before the measured runs, whichever transfer comes first."""
    from popfleet_audit import backlog, datasource  # noqa: PLC0415 - only with Spark up

    plan = datasource.plan_revive_log(target.split(","), token=None, start_from="earliest")
    ends = {p.key: min(p.end_queue_offset, p.start_queue_offset + WARM_UP_RECORDS) for p in plan}

    def frame(table: str) -> Any:
        reader = spark.read.format("popfleet").option("brokers", target).option("table", table)
        reader = reader.option("from", "earliest").option("transfer", transfer)
        return reader.option("endPositions", json.dumps(ends)).load()

    keys = frame("revive_keys")
    states = backlog.checkpoint_states(keys, frame("revive_queues"), grace_ms=5_000)
    backlog.group_backlog(states, frame("group_retry"), backlog.orphan_acks(keys)).collect()


def _measure(spark: Any, target: str, repeats: int, transfer: str) -> dict[str, Any]:
    from popfleet_audit import backlog  # noqa: PLC0415 - only with Spark up

    def frame(table: str) -> Any:
        reader = spark.read.format("popfleet").option("brokers", target).option("table", table)
        return reader.option("from", "earliest").option("transfer", transfer).load()

    load_at_start = [round(x, 2) for x in os.getloadavg()]
    frame("revive_queues").collect()  # warm-up: Python workers started, modules imported
    _warm_up_join(spark, target, transfer)
    runs: dict[str, list[float]] = {"scan": [], "scan_join": []}
    scanned = 0
    for _ in range(repeats):
        started = time.perf_counter()
        scanned = frame("revive_log").count()
        runs["scan"].append(time.perf_counter() - started)
        # As the job does it: the log read once, matched per revive queue as it is read
        # (``revive_keys``, cached), then reported.
        started = time.perf_counter()
        keys = frame("revive_keys").cache()
        states = backlog.checkpoint_states(keys, frame("revive_queues"), grace_ms=5_000)
        report = backlog.group_backlog(states, frame("group_retry"), backlog.orphan_acks(keys))
        groups = report.collect()
        runs["scan_join"].append(time.perf_counter() - started)
        keys.unpersist()
    unacked = sum(row.unacked_messages for row in groups)
    return {
        "transfer": transfer,
        "load_average_at_start": load_at_start,
        "records": scanned,
        "partitions": frame("revive_log").rdd.getNumPartitions(),
        "unacked_messages": unacked,
        **{f"{case}_s": runs[case] for case in runs},
        **{f"{case}_records_per_s": scanned / common.median(runs[case]) for case in runs},
    }


def _case(
    spark: Any,
    tmp: Path,
    revive_queues: int,
    total_records: int,
    *,
    brokers: int = 1,
    repeats: int,
    transfers: list[str],
) -> dict[str, Any]:
    """``total_records`` in each of ``brokers`` admin servers (one process each)."""
    servers = [
        _start_server(
            tmp / f"b{brokers}-q{revive_queues}-{total_records}" / f"data-{b}",
            revive_queues,
            total_records,
            broker_name=f"broker-{b}",
        )
        for b in range(brokers)
    ]
    target = ",".join(address for _, address, _ in servers)
    case: dict[str, Any] = {"brokers": brokers}
    try:
        case["revive_stats_first_then_second_s"] = _revive_stats_s(servers[0][1])
        for _, address, _ in servers[1:]:
            _revive_stats_s(address)  # each broker's first (long) call before measuring
        for transfer in transfers:
            case[transfer] = _measure(spark, target, repeats, transfer)
            shown = {k: round(v) for k, v in case[transfer].items() if k.endswith("per_s")}
            print(
                f"{brokers} broker(s) x {revive_queues} revive queues x {total_records} records, "
                f"{transfer}: {shown} (load {case[transfer]['load_average_at_start']})",
                flush=True,
            )
    finally:
        for proc, _, _ in servers:
            _stop_server(proc)
    case["generate_s"] = max(generate_s for _, _, generate_s in servers)
    case["expected_unacked_messages"] = brokers * (total_records // 2) * MESSAGES_PER_CK // 2
    if {"batches", "records"} <= set(transfers):
        for kind in ("scan", "scan_join"):
            key = f"{kind}_records_per_s"
            case[f"{kind}_speedup_batches_vs_records"] = case["batches"][key] / case["records"][key]
    return case


def _bench(args: argparse.Namespace) -> dict[str, Any]:
    from popfleet_audit import session  # noqa: PLC0415 - Spark only in the measuring process

    spark = session.build("local[2]", app_name="bench-audit-throughput")
    try:
        with tempfile.TemporaryDirectory(prefix="audit-bench-") as tmp:
            headline = _case(
                spark,
                Path(tmp),
                args.queues,
                args.records,
                repeats=args.repeats,
                transfers=args.transfers,
            )
            scaling = {
                str(n): _case(
                    spark,
                    Path(tmp),
                    args.queues,
                    args.scaling_records,
                    brokers=n,
                    repeats=args.repeats,
                    transfers=["batches"],
                )
                for n in (args.brokers if args.scaling_records else [])
            }
    finally:
        spark.stop()
    if scaling:
        base = scaling[str(args.brokers[0])]["batches"]
        for case in scaling.values():
            for kind in ("scan", "scan_join"):
                key = f"{kind}_records_per_s"
                case["batches"][f"{kind}_speedup_vs_{args.brokers[0]}_broker"] = (
                    case["batches"][key] / base[key]
                )
    return {"headline": headline, "scaling_by_brokers": scaling}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser("serve", help="(internal) serve a generated store's admin API")
    serve.add_argument("--data-dir", type=Path, required=True)
    serve.add_argument("--revive-queues", type=int, required=True)
    serve.add_argument("--records", type=int, required=True)
    serve.add_argument("--ready-file", type=Path, required=True)
    serve.add_argument("--broker-name", default=BROKER)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--queues", type=int, default=8, help="revive queues per broker")
    parser.add_argument(
        "--brokers", type=lambda s: [int(p) for p in s.split(",")], default=[1, 2, 3]
    )
    parser.add_argument(
        "--scaling-records", type=int, default=300_000, help="per broker; 0 = no broker series"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--transfers", type=lambda s: s.split(","), default=["batches", "records"])
    args = parser.parse_args()
    if args.command == "serve":
        asyncio.run(
            _serve(
                args.data_dir, args.revive_queues, args.records, args.ready_file, args.broker_name
            )
        )
        return
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    results = _bench(args)
    path = common.write(
        "audit_throughput",
        {
            "records": args.records,
            "revive_queues": args.queues,
            "scaling_records_per_broker": args.scaling_records,
            "master": "local[2]",
            "repeats": args.repeats,
            "transfers": args.transfers,
            **results,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
