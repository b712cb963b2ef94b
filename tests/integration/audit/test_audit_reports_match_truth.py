"""PySpark local[2] against a live broker: the audit reports equal the truth the test computed.

One broker (three role processes, revive killed: a stuck revive) is driven into
a known state by the official client (see :mod:`.scenario`); then the audits
run twice through ``jobs.run`` on the shared session. The truth is computed
from the client's receipts and handles only, never from the admin API.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from popfleet_audit import config as configuration
from popfleet_audit import datasource, jobs, outputs
from popfleet_audit.findings import AuditSummary
from tests.integration.audit import fleet, scenario
from tests.integration.audit.scenario import GROUP, TOPIC, Truth


@dataclass
class Audited:
    target: str
    truth: Truth
    work_dir: Path


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Audited]:
    work_dir = tmp_path_factory.mktemp("audit")
    broker, target = fleet.start_roles(work_dir / "broker")
    loop = asyncio.new_event_loop()  # the official client asks the main thread for one
    asyncio.set_event_loop(loop)
    try:
        asyncio.run(fleet.create(target, topic=TOPIC, queues=scenario.QUEUES, groups=(GROUP,)))
        broker.kill("revive")  # a stuck revive: overdue checkpoints stay
        truth = scenario.drive(broker.endpoint)
        scenario.wait_settled(target, truth)
        yield Audited(target=target, truth=truth, work_dir=work_dir)
    finally:
        asyncio.set_event_loop(None)
        loop.close()
        broker.stop()
        print(broker.logs())


def _run(spark: SparkSession, audited: Audited, run_id: str, job: str = "all") -> AuditSummary:
    config = configuration.parse_args(
        [
            job,
            "--brokers", audited.target,
            "--output", str(audited.work_dir / run_id),
            "--history", str(audited.work_dir / "history"),
            "--overdue-grace-ms", str(scenario.GRACE_MS),
            "--run-id", run_id,
        ]
    )  # fmt: skip
    return jobs.run(spark, config, token=None)


@pytest.mark.timeout(1500)  # a JVM start and ~30 Spark jobs on a shared, loaded 2-core machine
def test_backlog_lag_and_burrow_match_truth(spark: SparkSession, audited: Audited) -> None:
    truth = audited.truth
    first = _run(spark, audited, "run-1")
    found = first.groups[GROUP]
    unacked = truth.unacked(truth.popped)
    unacked_short = truth.unacked(truth.short)
    assert len(unacked_short) > 0
    assert len(truth.unacked(truth.long)) > 0
    assert found.revive_backlog == len(unacked)
    assert found.unacked_checkpoints == len({p.checkpoint for p in unacked})
    assert found.overdue_checkpoints == len({p.checkpoint for p in unacked_short})
    assert (found.retry_messages, found.dlq_messages) == (0, 0)  # revive never ran
    assert found.lag_messages == scenario.MESSAGES - len(truth.popped)
    assert found.in_flight_messages == len(truth.unacked(truth.long))
    # The age of the oldest unconsumed message, on the broker's clock at the read: it was
    # produced between produced_from and produced_until (same host, same clock).
    read_at_ms = max(p["audited_at_ms"] for p in first.partitions)
    assert found.time_lag_ms is not None
    assert read_at_ms - truth.produced_until_ms <= found.time_lag_ms
    assert found.time_lag_ms <= read_at_ms - truth.produced_from_ms
    assert found.status == "OK"  # one audit: no window yet

    partitions = {(p["topic"], p["queue_id"]): p for p in first.partitions if p["group"] == GROUP}
    assert {q: p["lag_messages"] for (_, q), p in partitions.items()} == {
        q: truth.lag(q) for q in range(scenario.QUEUES)
    }
    assert {q: p["in_flight_messages"] for (_, q), p in partitions.items()} == {
        q: truth.in_flight(q) for q in range(scenario.QUEUES)
    }

    revive_groups = spark.read.parquet(str(audited.work_dir / "run-1" / outputs.REVIVE_GROUPS))
    (row,) = revive_groups.filter(revive_groups.group == GROUP).collect()
    assert row.overdue_messages == len(unacked_short)
    assert row.unacked_messages == len(unacked)
    summary = json.loads((audited.work_dir / "run-1" / outputs.SUMMARY).read_text())
    assert summary["groups"][GROUP]["revive_backlog"] == len(unacked)
    metrics = (audited.work_dir / "run-1" / outputs.METRICS).read_text()
    assert (
        f'popfleet_audit_group_revive_backlog_messages{{group="{GROUP}"}} {len(unacked)}' in metrics
    )

    # Nothing moves between the runs: queues holding un-acked messages in flight STALL, queues
    # with lag and nothing in flight STOP, caught-up queues stay OK; the group is ERR.
    second = _run(spark, audited, "run-2", job="lag")
    expected = {}
    for queue in range(scenario.QUEUES):
        if truth.lag(queue) == 0:
            expected[queue] = "OK"
        else:
            expected[queue] = "STALL" if truth.in_flight(queue) > 0 else "STOP"
    got = {p["queue_id"]: p["status"] for p in second.partitions if p["group"] == GROUP}
    assert got == expected
    assert second.groups[GROUP].status == ("ERR" if set(expected.values()) != {"OK"} else "OK")


@pytest.mark.timeout(600)  # reads through the data source three times on a loaded machine
def test_revive_log_read_resumes_where_it_ended(spark: SparkSession, audited: Audited) -> None:
    plan = datasource.plan_revive_log([audited.target], token=None, start_from="earliest")
    assert len(plan) == 8  # one partition per revive queue of the broker
    ends = {p.key: p.end_queue_offset for p in plan}
    middles = {key: end // 2 for key, end in ends.items()}

    def read(starts: dict[str, int], stops: dict[str, int]) -> list[tuple[str, int]]:
        frame = (
            spark.read.format("popfleet")
            .option("brokers", audited.target)
            .option("table", "revive_log")
            .option("startPositions", json.dumps(starts))
            .option("endPositions", json.dumps(stops))
            .load()
        )
        assert frame.rdd.getNumPartitions() == len(plan)
        return sorted(
            (f"{r.broker_name}/{r.revive_queue_id}", r.queue_offset) for r in frame.collect()
        )

    whole = read({key: 0 for key in ends}, ends)
    first_half = read({key: 0 for key in ends}, middles)
    second_half = read(middles, ends)
    assert len(whole) == sum(ends.values()) > 0
    assert sorted(first_half + second_half) == whole
    assert not set(first_half) & set(second_half)


@pytest.mark.timeout(600)  # four reads through the data source on a loaded machine
@pytest.mark.parametrize("table", ["revive_log", "revive_keys"])
def test_arrow_batches_and_record_rows_read_the_same(
    spark: SparkSession, audited: Audited, table: str
) -> None:
    """Both transfers, for the raw log and for the log matched per revive queue."""

    def read(transfer: str) -> list[tuple[object, ...]]:
        frame = (
            spark.read.format("popfleet")
            .option("brokers", audited.target)
            .option("table", table)
            .option("from", "earliest")
            .option("transfer", transfer)
            .load()
            .drop("broker_now_ms")  # the broker's clock when each read was planned
        )
        return sorted((tuple(row) for row in frame.collect()), key=repr)

    batches = read("batches")
    assert len(batches) > 0
    assert batches == read("records")
