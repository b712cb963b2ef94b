"""Burrow-style lag evaluation over a sliding window of audits, POP-aware: pure transforms.

Input: the lag history table (schemas.LAG_HISTORY), one row per audit and
partition (broker_name, group, topic, queue_id). For each partition the window
is its newest ``window`` audits; the newest is the *current* one.

Derived per audit: ``acked_position = committed - in_flight`` (messages below
the committed offset that are done: acked or revived) and ``unfinished = lag +
in_flight`` (messages not done). A POP consumer that acks moves
``acked_position`` even while the committed offset stands still (a FIFO queue
waiting for acks, a full commit deque).

Rules, in order (Burrow's order; the first that matches wins):

  1. current lag 0, or fewer than 2 audits in the window -> **OK**
     (``complete`` is false until the window is full);
  2. neither the committed offset nor ``acked_position`` moved in the window,
     and nothing is in flight now -> **STOP** (the consumers stopped:
     no pops, no acks, lag waiting);
  3. some audit in the window had lag 0 -> **OK**;
  4. the committed offset went down between two audits -> **REWIND**;
  5. neither the committed offset nor ``acked_position`` moved -> **STALL**
     (messages are held in flight and never acked). POP-aware: in-flight
     messages with advancing acks are *not* STALL;
  6. ``unfinished`` never went down between two audits -> **WARN** (the
     consumers move, but not fast enough);
  7. otherwise **OK**.

The group status is the worst partition status capped at **ERR** (STOP,
STALL and REWIND partitions make the group ERR; else WARN; else OK), with
Burrow's ``complete`` (fraction of partitions with full windows), ``maxlag``
and ``totallag``.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as sf

PARTITION = ("broker_name", "group", "topic", "queue_id")
ERROR_STATUSES = ("STALL", "STOP", "REWIND")
GROUP_STATUSES = ("OK", "WARN", "ERR")


def windowed(history: DataFrame, *, window: int) -> DataFrame:
    """The newest ``window`` audits of each partition, with their step-to-step changes."""
    newest_first = Window.partitionBy(*PARTITION).orderBy(sf.col("audited_at_ms").desc())
    oldest_first = Window.partitionBy(*PARTITION).orderBy("audited_at_ms")
    acked = sf.col("committed_queue_offset") - sf.col("in_flight_messages")
    unfinished = sf.col("lag_messages") + sf.col("in_flight_messages")
    return (
        history.withColumn("_rank", sf.row_number().over(newest_first))
        .filter(sf.col("_rank") <= window)
        .withColumn("acked_position", acked)
        .withColumn("unfinished", unfinished)
        .withColumn("_prev_committed", sf.lag("committed_queue_offset").over(oldest_first))
        .withColumn("_prev_acked", sf.lag("acked_position").over(oldest_first))
        .withColumn("_prev_unfinished", sf.lag("unfinished").over(oldest_first))
    )


def evaluate(history: DataFrame, *, window: int) -> DataFrame:
    """One row per partition: status, complete, current lag figures (module docstring)."""
    if window < 2:
        raise ValueError("window must hold at least 2 audits")
    steps = windowed(history, window=window)
    prev = sf.col("_prev_committed")
    facts = steps.groupBy(*PARTITION).agg(
        sf.count(sf.lit(1)).alias("audits"),
        sf.max_by("lag_messages", "audited_at_ms").alias("lag_messages"),
        sf.max_by("time_lag_ms", "audited_at_ms").alias("time_lag_ms"),
        sf.max_by("in_flight_messages", "audited_at_ms").alias("in_flight_messages"),
        sf.max_by("committed_queue_offset", "audited_at_ms").alias("committed_queue_offset"),
        sf.max("audited_at_ms").alias("audited_at_ms"),
        sf.coalesce(sf.max(sf.col("lag_messages") == 0), sf.lit(False)).alias("_any_zero"),
        sf.coalesce(sf.max(sf.col("committed_queue_offset") < prev), sf.lit(False)).alias(
            "_rewound"
        ),
        sf.coalesce(sf.max(sf.col("committed_queue_offset") != prev), sf.lit(False)).alias(
            "_committed_moved"
        ),
        sf.coalesce(sf.max(sf.col("acked_position") > sf.col("_prev_acked")), sf.lit(False)).alias(
            "_acks_moved"
        ),
        sf.coalesce(sf.max(sf.col("unfinished") < sf.col("_prev_unfinished")), sf.lit(False)).alias(
            "_unfinished_fell"
        ),
    )
    still = ~sf.col("_committed_moved") & ~sf.col("_acks_moved")
    status = (
        sf.when((sf.col("lag_messages") == 0) | (sf.col("audits") < 2), sf.lit("OK"))
        .when(still & (sf.col("in_flight_messages") == 0), sf.lit("STOP"))
        .when(sf.col("_any_zero"), sf.lit("OK"))
        .when(sf.col("_rewound"), sf.lit("REWIND"))
        .when(still, sf.lit("STALL"))
        .when(~sf.col("_unfinished_fell"), sf.lit("WARN"))
        .otherwise(sf.lit("OK"))
    )
    return facts.select(
        *PARTITION,
        status.alias("status"),
        (sf.col("audits") >= window).alias("complete"),
        sf.col("audits").cast("int").alias("audits"),
        "committed_queue_offset",
        "lag_messages",
        "time_lag_ms",
        "in_flight_messages",
        "audited_at_ms",
    )


def group_status(partitions: DataFrame) -> DataFrame:
    """Per group: worst partition status capped at ERR, complete fraction, maxlag, totallag."""
    severity = (
        sf.when(sf.col("status").isin(*ERROR_STATUSES), sf.lit(2))
        .when(sf.col("status") == "WARN", sf.lit(1))
        .otherwise(sf.lit(0))
    )
    worst = sf.max(severity)
    return partitions.groupBy("group").agg(
        sf.when(worst == 2, sf.lit("ERR"))
        .when(worst == 1, sf.lit("WARN"))
        .otherwise(sf.lit("OK"))
        .alias("status"),
        (sf.sum(sf.col("complete").cast("double")) / sf.count(sf.lit(1))).alias("complete"),
        sf.max("lag_messages").cast("long").alias("max_lag"),
        sf.sum("lag_messages").cast("long").alias("total_lag"),
        sf.sum(sf.when(sf.col("status") != "OK", 1).otherwise(0))
        .cast("long")
        .alias("partitions_not_ok"),
    )
