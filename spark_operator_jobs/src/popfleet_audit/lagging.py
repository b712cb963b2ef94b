"""Lag per (broker, group, topic, queue) from the offset table: pure DataFrame transforms.

Input: the ``popfleet`` data source's ``offsets`` table (schemas.OFFSETS).

* **message lag** = ``max - max(committed, min)``, never negative (a committed
  offset below the retention min counts from the min). Only queues the group has
  committed on have lag -- the offset table holds committed rows only -- as in
  Burrow and kafka-lag-exporter (``QueueOffsets.lag_messages`` and the CLI agree);
* **time lag** = the broker's clock minus the store time of the oldest
  unconsumed message (the one at the committed offset): the age of the oldest
  message the group has not got past. 0 when there is no lag. This reads the
  message's own timestamp (no interpolation, so no "3 years" after a reset or
  on a new group, unlike kafka-lag-exporter);
* **in flight** = popped, not acked, not yet revived (POP); 0 when unknown.

System topics (retry, DLQ, revive log) are left out: retry and DLQ depths are
the revive backlog audit's business. Rows whose queue no longer exists are
left out too (nothing to consume).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf

SYSTEM_TOPIC_PREFIXES = ("%RETRY%", "%DLQ%", "rmq_sys_")
KEY = ("broker_name", "group", "topic", "queue_id")


def _is_system(topic: Column) -> Column:
    result = sf.lit(False)
    for prefix in SYSTEM_TOPIC_PREFIXES:
        result = result | topic.startswith(prefix)
    return result


def queue_lag(offsets: DataFrame) -> DataFrame:
    """One row per (broker_name, group, topic, queue_id) with its lag (module docstring)."""
    start = sf.greatest(sf.col("committed_queue_offset"), sf.col("min_queue_offset"))
    lag = sf.greatest(sf.col("max_queue_offset") - start, sf.lit(0)).cast("long")
    oldest = sf.col("oldest_unconsumed_store_time_ms")
    time_lag = sf.when(
        (lag > 0) & oldest.isNotNull(),
        sf.greatest(sf.col("broker_now_ms") - oldest, sf.lit(0)),
    ).otherwise(sf.lit(0))
    return offsets.filter(sf.col("queue_exists") & ~_is_system(sf.col("topic"))).select(
        *KEY,
        sf.col("committed_queue_offset"),
        sf.col("max_queue_offset"),
        lag.alias("lag_messages"),
        time_lag.cast("long").alias("time_lag_ms"),
        sf.coalesce(sf.col("in_flight_messages"), sf.lit(0))
        .cast("long")
        .alias("in_flight_messages"),
        sf.col("broker_now_ms"),
    )


def history_rows(lags: DataFrame, *, run_id: str) -> DataFrame:
    """``queue_lag`` rows as rows of the lag history table (schemas.LAG_HISTORY).

    The sample time of a row is its broker's clock at the read, so a window
    never mixes the audit host's clock with the brokers'.
    """
    return lags.select(
        sf.lit(run_id).alias("run_id"),
        sf.col("broker_now_ms").alias("audited_at_ms"),
        *KEY,
        "committed_queue_offset",
        "max_queue_offset",
        "lag_messages",
        "time_lag_ms",
        "in_flight_messages",
    )


def group_lag(lags: DataFrame) -> DataFrame:
    """Per group: total message lag, max time lag, total in flight, queues audited."""
    return lags.groupBy("group").agg(
        sf.sum("lag_messages").cast("long").alias("lag_messages"),
        sf.max("time_lag_ms").cast("long").alias("time_lag_ms"),
        sf.sum("in_flight_messages").cast("long").alias("in_flight_messages"),
        sf.count(sf.lit(1)).cast("long").alias("queues"),
    )
