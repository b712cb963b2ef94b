"""Revive backlog: CK and ACK records of the revive log joined per group. Pure transforms.

Inputs (``popfleet`` data source tables): ``revive_keys`` (schemas.REVIVE_KEYS: the
revive log with steps 1-3 done per revive queue where it is read, :mod:`.ckmatch`),
``revive_queues`` (schemas.REVIVE_QUEUES) and ``group_retry`` (schemas.GROUP_RETRY).

How a message's state is decided, as numbered steps (the revive role's own
matching, DESIGN §3.2, replayed over the scanned records):

  1. A checkpoint (CK) is keyed by the tuple (broker, revive queue, topic,
     group, queue id, start offset, pop time, CK broker name) -- never by a
     concatenated string. A CK written twice counts once (its first position,
     the union of its bitmaps).
  2. Each CK message (``queue_offsets[i]``) is acked when bit *i* of the CK's
     bitmap is set (acks merged in memory before the CK was flushed) or when an
     ACK/BATCH_ACK record with the same key and that offset lies **after** the
     CK in the revive queue (acks after the flush). An ACK without a broker
     name means the local broker (upstream #8460; the data source fills it in).
  3. Duplicate acks (a second record for an acked message, or a record for a
     bit already set) and orphan acks (no CK in the scan: already revived and
     passed, never written, or late after a revive) are counted, never errors.
  4. A CK before its revive queue's progress is resolved (everything before
     the progress is), so it is dropped; the rest with un-acked messages are
     the **backlog**. A change-invisible chain needs nothing special: the new
     one-message CK holds the message and the old CK is acked for it.
  5. A backlog CK is **overdue** when ``revive_time + grace`` lies before the
     broker's clock: revive should have re-put its messages by then (stuck
     revive). Caveat: a CK revived behind an older pending CK stays in the log
     after the progress until that older CK resolves, and counts as overdue
     until then.

Ages are the broker's clock minus the pop time of the CK.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf

from popfleet_audit import ckmatch

CK_KEY = ckmatch.CK_KEY
AGE_BUCKETS_MS: tuple[tuple[str, int | None], ...] = (
    ("age_lt_10s", 10_000),
    ("age_lt_1m", 60_000),
    ("age_lt_10m", 600_000),
    ("age_lt_1h", 3_600_000),
    ("age_ge_1h", None),
)


def overdue_and_age(grace_ms: int) -> list[Column]:
    """Step 5 on a row with a CK's revive time, pop time and broker clock."""
    return [
        (sf.col("revive_time_ms") + sf.lit(grace_ms) < sf.col("broker_now_ms")).alias("overdue"),
        (sf.col("broker_now_ms") - sf.col("pop_time_ms")).alias("age_ms"),
    ]


def records_read(keys: DataFrame) -> int:
    """Revive-log records read to make ``keys`` (``revive_keys`` rows)."""
    rows = keys.filter(sf.col("row_kind") == "revive_queue").agg(sf.sum("records"))
    return int(rows.collect()[0][0] or 0)


def checkpoint_states(keys: DataFrame, revive_queues: DataFrame, *, grace_ms: int) -> DataFrame:
    """One row per unresolved CK key: un-acked messages, duplicate acks, overdue, age.

    The per-message rules summed per CK, from ``revive_keys`` rows (the ``popfleet``
    data source matches each revive queue where it reads it, :mod:`.ckmatch`): a message
    is acked when its bit is set in the CK's bitmap (``in_ck``) or by an ACK entry after
    the CK (``by_records``); duplicate acks are the matching entries less the bits they
    were first to set. Step 4 drops CKs before their revive queue's progress (the few
    revive-queue rows are broadcast: no shuffle).
    """
    progress = revive_queues.select(
        "broker_name",
        "revive_queue_id",
        sf.coalesce("revive_queue_offset", "min_queue_offset").alias("progress_queue_offset"),
    )
    unresolved = (
        keys.filter(sf.col("row_kind") == "checkpoint")
        .join(sf.broadcast(progress), on=["broker_name", "revive_queue_id"], how="left")
        .filter(
            sf.col("progress_queue_offset").isNull()
            | (sf.col("ck_position") >= sf.col("progress_queue_offset"))
        )
    )
    acked = sf.col("in_ck").bitwiseOR(sf.col("by_records"))
    first_by_records = sf.col("by_records").bitwiseAND(sf.bitwise_not("in_ck"))
    return unresolved.select(
        *CK_KEY,
        "ck_position",
        (sf.col("messages") - sf.bit_count(acked)).cast("long").alias("unacked"),
        (sf.col("matching_entries") - sf.bit_count(first_by_records))
        .cast("long")
        .alias("duplicate_acks"),
        *overdue_and_age(grace_ms),
        "revive_time_ms",
    )


def orphan_acks(keys: DataFrame) -> DataFrame:
    """Per (broker_name, group): ACK entries of keys without any CK in the scan (already
    revived and passed, never written, or late after a revive), from ``revive_keys``
    rows."""
    return (
        keys.filter(sf.col("row_kind") == "orphan")
        .groupBy("broker_name", "group")
        .agg(sf.sum("orphan_entries").cast("long").alias("orphan_acks"))
    )


def _age_bucket_sums(unacked: Column) -> list[Column]:
    sums, lower = [], 0
    for name, upper in AGE_BUCKETS_MS:
        in_bucket = sf.col("age_ms") >= lower
        if upper is not None:
            in_bucket = in_bucket & (sf.col("age_ms") < upper)
            lower = upper
        sums.append(sf.sum(sf.when(in_bucket, unacked).otherwise(0)).cast("long").alias(name))
    return sums


def group_backlog(checkpoints: DataFrame, group_retry: DataFrame, orphans: DataFrame) -> DataFrame:
    """Per (broker_name, group): backlog, overdue, ages, retry and DLQ depths, odd acks.

    ``checkpoints`` are :func:`checkpoint_states` rows.
    """
    unacked = sf.col("unacked")
    pending = unacked > 0
    per_group = checkpoints.groupBy("broker_name", "group").agg(
        sf.count(sf.when(pending, 1)).cast("long").alias("unacked_checkpoints"),
        sf.sum(unacked).cast("long").alias("unacked_messages"),
        sf.count(sf.when(pending & sf.col("overdue"), 1)).cast("long").alias("overdue_checkpoints"),
        sf.sum(sf.when(sf.col("overdue"), unacked).otherwise(0))
        .cast("long")
        .alias("overdue_messages"),
        sf.coalesce(sf.max(sf.when(pending, sf.col("age_ms"))), sf.lit(0))
        .cast("long")
        .alias("oldest_unacked_age_ms"),
        *_age_bucket_sums(unacked),
        sf.sum("duplicate_acks").cast("long").alias("duplicate_acks"),
    )
    retry = group_retry.select("broker_name", "group", "retry_messages", "dlq_messages")
    counts = [
        "unacked_checkpoints", "unacked_messages", "overdue_checkpoints", "overdue_messages",
        "oldest_unacked_age_ms", *[name for name, _ in AGE_BUCKETS_MS], "duplicate_acks",
        "retry_messages", "dlq_messages", "orphan_acks",
    ]  # fmt: skip
    return (
        per_group.join(retry, on=["broker_name", "group"], how="full_outer")
        .join(orphans, on=["broker_name", "group"], how="full_outer")
        .select(
            "broker_name",
            "group",
            *[sf.coalesce(sf.col(c), sf.lit(0)).cast("long").alias(c) for c in counts],
        )
    )


def group_totals(backlog: DataFrame) -> DataFrame:
    """Per group over every broker: sums, and the oldest age as a max."""
    sums = [
        c for c in backlog.columns if c not in ("broker_name", "group", "oldest_unacked_age_ms")
    ]
    return backlog.groupBy("group").agg(
        *[sf.sum(c).cast("long").alias(c) for c in sums],
        sf.max("oldest_unacked_age_ms").cast("long").alias("oldest_unacked_age_ms"),
    )


def revive_queue_report(revive_queues: DataFrame, checkpoints: DataFrame) -> DataFrame:
    """Per (broker_name, revive queue): bounds, progress, revive lag, backlog and overdue CKs
    (``checkpoints``: :func:`checkpoint_states` rows)."""
    pending = sf.col("unacked") > 0
    per_queue = checkpoints.groupBy("broker_name", "revive_queue_id").agg(
        sf.count(sf.when(pending, 1)).cast("long").alias("backlog_checkpoints"),
        sf.count(sf.when(pending & sf.col("overdue"), 1)).cast("long").alias("overdue_checkpoints"),
    )
    return revive_queues.join(per_queue, on=["broker_name", "revive_queue_id"], how="left").select(
        "broker_name",
        "revive_queue_id",
        "min_queue_offset",
        "max_queue_offset",
        "revive_queue_offset",
        sf.col("lag_messages").alias("revive_lag_messages"),
        sf.col("lag_ms").alias("revive_lag_ms"),
        sf.coalesce("backlog_checkpoints", sf.lit(0)).cast("long").alias("backlog_checkpoints"),
        sf.coalesce("overdue_checkpoints", sf.lit(0)).cast("long").alias("overdue_checkpoints"),
    )
