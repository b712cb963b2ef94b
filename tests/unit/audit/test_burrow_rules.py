"""burrow.evaluate and group_status: every rule, its order, the window, POP awareness."""

from __future__ import annotations

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.testing import assertDataFrameEqual

from popfleet_audit import burrow, schemas

pytestmark = pytest.mark.timeout(600)  # the first test of a run starts the shared JVM

WINDOW = 4
STEP_MS = 60_000


def _history(spark: SparkSession, queues: dict[int, list[tuple[int, int, int]]]) -> DataFrame:
    """``queues[q]`` = audits oldest first as (committed, max, in flight)."""
    rows = []
    for queue_id, audits in queues.items():
        for index, (committed, max_offset, in_flight) in enumerate(audits):
            lag = max(0, max_offset - committed)
            rows.append(
                (f"r{index}", index * STEP_MS, "b", "g", "t", queue_id, committed, max_offset,
                 lag, 0, in_flight)
            )  # fmt: skip
    return spark.createDataFrame(rows, schemas.LAG_HISTORY)


def _statuses(spark: SparkSession, queues: dict[int, list[tuple[int, int, int]]]) -> dict[int, str]:
    result = burrow.evaluate(_history(spark, queues), window=WINDOW)
    return {row.queue_id: row.status for row in result.collect()}


def test_each_rule(spark: SparkSession) -> None:
    got = _statuses(
        spark,
        {
            0: [(10, 10, 0), (10, 30, 0), (10, 40, 0), (20, 20, 0)],  # 1: no lag now
            1: [(10, 50, 0)],  # 1: one audit only
            2: [(10, 20, 0), (10, 25, 0), (10, 30, 0), (10, 30, 0)],  # 2: STOP
            3: [(10, 10, 0), (12, 20, 0), (15, 30, 0), (18, 40, 0)],  # 3: lag 0 in window
            4: [(30, 50, 0), (20, 50, 0), (25, 50, 0), (28, 50, 0)],  # 4: REWIND
            5: [(10, 50, 4), (10, 50, 4), (10, 50, 4), (10, 50, 4)],  # 5: STALL (held in flight)
            6: [(10, 50, 0), (12, 60, 0), (14, 70, 0), (16, 80, 0)],  # 6: WARN (falling behind)
            7: [(10, 50, 0), (20, 50, 0), (30, 50, 0), (40, 50, 0)],  # 7: OK (catching up)
        },
    )
    assert got == {
        0: "OK", 1: "OK", 2: "STOP", 3: "OK", 4: "REWIND", 5: "STALL", 6: "WARN", 7: "OK",
    }  # fmt: skip


def test_pop_acks_advancing_is_not_stall(spark: SparkSession) -> None:
    got = _statuses(
        spark,
        {
            # committed stands still (e.g. a FIFO queue waiting for acks) while acks come in
            0: [(10, 50, 8), (10, 50, 6), (10, 50, 3), (10, 50, 1)],
            # same committed offset, in flight churns but never acked down: held, STALL
            1: [(10, 50, 8), (10, 50, 8), (10, 50, 8), (10, 50, 8)],
            # acks advance but new messages arrive faster: WARN, still not STALL
            2: [(10, 50, 8), (10, 60, 6), (10, 70, 4), (10, 80, 2)],
        },
    )
    assert got == {0: "OK", 1: "STALL", 2: "WARN"}


def test_rule_order_and_window(spark: SparkSession) -> None:
    got = _statuses(
        spark,
        {
            # STOP is checked before "lag 0 in window": stopped after catching up once
            0: [(10, 10, 0), (10, 20, 0), (10, 30, 0), (10, 40, 0)],
            # a rewind older than the window is forgotten: only the newest 4 audits count
            1: [(50, 60, 0), (10, 60, 0), (20, 60, 0), (30, 60, 0), (40, 60, 0)],
            # a rewind with a zero-lag audit in the window: OK wins (Burrow's order)
            2: [(30, 30, 0), (20, 40, 0), (25, 40, 0), (28, 40, 0)],
        },
    )
    assert got == {0: "STOP", 1: "OK", 2: "OK"}


def test_evaluate_reports_current_figures_and_completeness(spark: SparkSession) -> None:
    history = _history(spark, {0: [(10, 20, 1), (12, 20, 1)], 1: [(1, 9, 0)] * 4})
    result = burrow.evaluate(history, window=WINDOW).select(
        "queue_id", "status", "complete", "audits", "committed_queue_offset", "lag_messages"
    )
    assertDataFrameEqual(
        result,
        spark.createDataFrame(
            [(0, "OK", False, 2, 12, 8), (1, "STOP", True, 4, 1, 8)],
            "queue_id int, status string, complete boolean, audits int, "
            "committed_queue_offset long, lag_messages long",
        ),
    )


def test_window_must_hold_two_audits(spark: SparkSession) -> None:
    with pytest.raises(ValueError, match="at least 2"):
        burrow.evaluate(_history(spark, {0: [(1, 2, 0)]}), window=1)


def test_group_status_is_worst_partition_capped_at_err(spark: SparkSession) -> None:
    partitions = spark.createDataFrame(
        [
            ("b", "errs", "t", 0, "OK", True, 0),
            ("b", "errs", "t", 1, "WARN", True, 5),
            ("b", "errs", "t", 2, "STALL", False, 7),
            ("b", "warns", "t", 0, "WARN", True, 3),
            ("b", "warns", "t", 1, "OK", True, 0),
            ("b", "fine", "t", 0, "OK", False, 0),
        ],
        "broker_name string, group string, topic string, queue_id int, status string, "
        "complete boolean, lag_messages long",
    )
    assertDataFrameEqual(
        burrow.group_status(partitions),
        spark.createDataFrame(
            [
                ("errs", "ERR", 2 / 3, 7, 12, 2),
                ("warns", "WARN", 1.0, 3, 3, 1),
                ("fine", "OK", 0.0, 0, 0, 0),
            ],
            "group string, status string, complete double, max_lag long, total_lag long, "
            "partitions_not_ok long",
        ),
    )
