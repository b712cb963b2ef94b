"""lagging.queue_lag and group_lag on hand-built offset tables."""

from __future__ import annotations

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.testing import assertDataFrameEqual

from popfleet_audit import lagging, schemas

pytestmark = pytest.mark.timeout(600)  # the first test of a run starts the shared JVM

NOW = 1_000_000


def _offsets(spark: SparkSession, rows: list[tuple[object, ...]]) -> DataFrame:
    full = [("h:1", "broker-0", *row, NOW) for row in rows]
    return spark.createDataFrame(full, schemas.OFFSETS)


def test_lag_time_lag_and_in_flight_per_queue(spark: SparkSession) -> None:
    offsets = _offsets(
        spark,
        [
            # group, topic, queue, committed, min, max, exists, in flight, oldest store time
            ("g", "t", 0, 10, 0, 25, True, 3, NOW - 4_000),
            ("g", "t", 1, 25, 0, 25, True, 0, None),  # caught up
            ("g", "t", 2, 2, 5, 9, True, None, NOW - 100),  # committed below retention min
            ("g", "gone", 0, 7, 0, 0, False, None, None),  # topic deleted
            ("g", "%RETRY%g+t", 0, 0, 0, 4, True, None, NOW - 50),  # retry: backlog audit's
            ("g", "t", 3, 30, 0, 25, True, 0, None),  # ahead of max (reset): never negative
        ],
    )
    expected = spark.createDataFrame(
        [
            ("broker-0", "g", "t", 0, 10, 25, 15, 4_000, 3, NOW),
            ("broker-0", "g", "t", 1, 25, 25, 0, 0, 0, NOW),
            ("broker-0", "g", "t", 2, 2, 9, 4, 100, 0, NOW),
            ("broker-0", "g", "t", 3, 30, 25, 0, 0, 0, NOW),
        ],
        "broker_name string, group string, topic string, queue_id int, "
        "committed_queue_offset long, max_queue_offset long, lag_messages long, "
        "time_lag_ms long, in_flight_messages long, broker_now_ms long",
    )
    lags = lagging.queue_lag(offsets)
    assertDataFrameEqual(lags, expected)
    totals = lagging.group_lag(lags)
    assertDataFrameEqual(
        totals,
        spark.createDataFrame(
            [("g", 19, 4_000, 3, 4)],
            "group string, lag_messages long, time_lag_ms long, in_flight_messages long, "
            "queues long",
        ),
    )


def test_history_rows_take_the_brokers_clock(spark: SparkSession) -> None:
    offsets = _offsets(spark, [("g", "t", 0, 1, 0, 3, True, 1, NOW - 10)])
    rows = lagging.history_rows(lagging.queue_lag(offsets), run_id="r1")
    assertDataFrameEqual(
        rows,
        spark.createDataFrame(
            [("r1", NOW, "broker-0", "g", "t", 0, 1, 3, 2, 10, 1)], schemas.LAG_HISTORY
        ),
    )
