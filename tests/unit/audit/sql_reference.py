"""The revive-backlog rules in Spark SQL, message by message: the tests' reference.

``popfleet_audit.ckmatch`` matches CKs and ACKs per revive queue with numpy where the
data source reads them, and ``backlog.checkpoint_states`` turns its rows into per-CK
states; this is the same rules (``backlog``'s steps 1-5) written the plain way, as Spark
SQL over ``revive_log`` rows with a row per message, so the tests can compare the two
on any log. Not shipped: nothing in the audit runs it.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf

from popfleet_audit.backlog import CK_KEY, overdue_and_age


def per_checkpoint_key(revive_log: DataFrame) -> DataFrame:
    """One row per CK key: its CKs merged (step 1) and its ACK records collected.

    One aggregation over the log, so the log is shuffled once, and after Spark's
    map-side partial aggregation (a CK and its ACKs live in the same revive queue, so
    in the same input partition) about one row per key crosses it. A key with ACKs
    but no CK has a null ``ck_position`` (orphan acks).
    """
    is_ck = sf.col("kind") == "CHECKPOINT"
    is_ack = sf.col("kind").isin("ACK", "BATCH_ACK")
    ack = sf.struct(
        sf.col("queue_offset").alias("position"), sf.col("queue_offsets").alias("offsets")
    )
    return (
        revive_log.filter(is_ck | is_ack)
        .groupBy(*CK_KEY)
        .agg(
            sf.min(sf.when(is_ck, sf.col("queue_offset"))).alias("ck_position"),
            sf.min(sf.when(is_ck, sf.col("revive_time_ms"))).alias("revive_time_ms"),
            sf.first(sf.when(is_ck, sf.col("queue_offsets")), ignorenulls=True).alias(
                "queue_offsets"
            ),
            sf.bit_or(sf.when(is_ck, sf.col("ack_bitmap"))).alias("ack_bitmap"),
            sf.max(sf.when(is_ck, sf.col("broker_now_ms"))).alias("broker_now_ms"),
            sf.collect_list(sf.when(is_ack, ack)).alias("acks"),
        )
    )


def _ack_offsets_after(ck_position: Column) -> Column:
    """Per CK key: the queue offsets of every ACK entry recorded after the CK (step 2),
    one array, computed once per key rather than per message."""
    after = sf.filter(
        sf.col("acks"), lambda a: (a["position"] > ck_position) & a["offsets"].isNotNull()
    )
    return sf.flatten(sf.transform(after, lambda a: a["offsets"]))


def _unresolved_keys(revive_log: DataFrame, revive_queues: DataFrame) -> DataFrame:
    """:func:`per_checkpoint_key` rows with a CK at or after its revive queue's progress
    (step 4), with the ACK entries after the CK as ``ack_offsets`` (step 2).

    The few revive-queue rows are broadcast, so the rows keep the key's partitioning.
    """
    progress = revive_queues.select(
        "broker_name",
        "revive_queue_id",
        sf.coalesce("revive_queue_offset", "min_queue_offset").alias("progress_queue_offset"),
    )
    keys = (
        per_checkpoint_key(revive_log)
        .filter(sf.col("ck_position").isNotNull())
        .join(sf.broadcast(progress), on=["broker_name", "revive_queue_id"], how="left")
        .filter(
            sf.col("progress_queue_offset").isNull()
            | (sf.col("ck_position") >= sf.col("progress_queue_offset"))
        )
    )
    return keys.select(
        *CK_KEY,
        "ck_position",
        "revive_time_ms",
        "broker_now_ms",
        "queue_offsets",
        "ack_bitmap",
        _ack_offsets_after(sf.col("ck_position")).alias("ack_offsets"),
    )


def message_states(revive_log: DataFrame, revive_queues: DataFrame, *, grace_ms: int) -> DataFrame:
    """One row per message of every unresolved CK: acked, overdue, age (steps 1-5).

    The per-message view of ``backlog.checkpoint_states`` (which the reports use: it says
    the same per CK without a row per message).
    """
    messages = _unresolved_keys(revive_log, revive_queues).select(
        "*", sf.posexplode("queue_offsets").alias("bit", "message_queue_offset")
    )
    acked_in_ck = sf.expr("(shiftright(ack_bitmap, bit) & 1) = 1")
    # ACK entries for this message: occurrences of its offset (array_remove drops them all).
    ack_records = (
        sf.size("ack_offsets")
        - sf.size(sf.array_remove("ack_offsets", sf.col("message_queue_offset")))
    ).cast("long")
    return messages.select(
        *CK_KEY,
        "ck_position",
        "message_queue_offset",
        (acked_in_ck | (ack_records > 0)).alias("acked"),
        (ack_records - sf.when(acked_in_ck, 0).otherwise(sf.least(ack_records, sf.lit(1)))).alias(
            "duplicate_acks"
        ),
        *overdue_and_age(grace_ms),
        "revive_time_ms",
    )
