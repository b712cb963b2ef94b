"""backlog transforms: CK/ACK joins per group, overdue checkpoints, ages, revive queues.

Covers acks merged before the CK flush (bitmap) and after it (ACK records),
an ACK positioned before its CK (does not count), duplicate and late (orphan)
acks, a change-invisible chain, duplicate CK records, the revive progress,
and retry/DLQ depths of a group without checkpoints; the reports' per-CK states
against the per-message rules on a random log.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf
from pyspark.testing import assertDataFrameEqual

from popfleet_audit import backlog, ckmatch, datasource, schemas
from tests.unit.audit import sql_reference

pytestmark = pytest.mark.timeout(600)  # the first test of a run starts the shared JVM

NOW = 10_000_000
GRACE_MS = 1_000


def ck(
    position: int,
    offsets: list[int],
    *,
    pop_time_ms: int,
    invisible_ms: int = 60_000,
    bitmap: int = 0,
    group: str = "g",
    queue_id: int = 0,
    revive_queue_id: int = 0,
) -> tuple[object, ...]:
    return (
        "h:1", "b0", revive_queue_id, position, position + 1, pop_time_ms, "CHECKPOINT", "ck",
        "t", group, queue_id, offsets[0], pop_time_ms, invisible_ms, pop_time_ms + invisible_ms,
        bitmap, offsets, "b0", 0, NOW,
    )  # fmt: skip


def ack(
    position: int,
    offsets: list[int],
    *,
    start: int,
    pop_time_ms: int,
    group: str = "g",
    queue_id: int = 0,
    revive_queue_id: int = 0,
) -> tuple[object, ...]:
    return (
        "h:1", "b0", revive_queue_id, position, position + 1, pop_time_ms, "ACK", "ack",
        "t", group, queue_id, start, pop_time_ms, None, None, None, offsets, "b0", None, NOW,
    )  # fmt: skip


def _log(spark: SparkSession, rows: list[tuple[object, ...]]) -> DataFrame:
    return spark.createDataFrame(rows, schemas.REVIVE_LOG)


def _keys(spark: SparkSession, rows: list[tuple[object, ...]]) -> DataFrame:
    """``revive_keys`` rows of a log of one partition, as the data source makes them."""
    matched = ckmatch.match(pa.Table.from_batches(datasource.rows_as_batches(iter(rows))))
    return spark.createDataFrame(
        [tuple(row.values()) for row in matched.to_pylist()], schemas.REVIVE_KEYS
    )


def _queues(spark: SparkSession, progress: dict[int, int | None]) -> DataFrame:
    rows = [("h:1", "b0", q, 0, 100, p, 5, 700, NOW) for q, p in progress.items()]
    return spark.createDataFrame(rows, schemas.REVIVE_QUEUES)


def _states(
    spark: SparkSession, rows: list[tuple[object, ...]], progress: int | None = None
) -> DataFrame:
    return sql_reference.message_states(
        _log(spark, rows), _queues(spark, {0: progress}), grace_ms=GRACE_MS
    )


def _acked(states: DataFrame) -> dict[tuple[int, int], bool]:
    return {(r.pop_time_ms, r.message_queue_offset): r.acked for r in states.collect()}


def test_acks_before_and_after_the_flush(spark: SparkSession) -> None:
    t = NOW - 5_000
    states = _states(
        spark,
        [
            ck(0, [0, 1, 2, 3], pop_time_ms=t, bitmap=0b0101),  # 0 and 2 acked in memory
            ack(1, [1], start=0, pop_time_ms=t),  # 1 acked after the flush
        ],
    )
    assert _acked(states) == {(t, 0): True, (t, 1): True, (t, 2): True, (t, 3): False}


def test_an_ack_before_its_checkpoint_does_not_count(spark: SparkSession) -> None:
    t = NOW - 5_000
    states = _states(spark, [ack(0, [7], start=7, pop_time_ms=t), ck(1, [7, 8], pop_time_ms=t)])
    assert _acked(states) == {(t, 7): False, (t, 8): False}


def test_duplicate_and_late_acks_are_counted_not_errors(spark: SparkSession) -> None:
    t, old = NOW - 5_000, NOW - 900_000
    rows = [
        ck(0, [0, 1], pop_time_ms=t, bitmap=0b01),
        ack(1, [0], start=0, pop_time_ms=t),  # duplicate of the bitmap bit
        ack(2, [1], start=0, pop_time_ms=t),
        ack(3, [1], start=0, pop_time_ms=t),  # duplicate record
        ack(4, [40], start=40, pop_time_ms=old),  # late: its CK was revived and passed
    ]
    log, keys = _log(spark, rows), _keys(spark, rows)
    states = sql_reference.message_states(log, _queues(spark, {0: 0}), grace_ms=GRACE_MS)
    assert _acked(states) == {(t, 0): True, (t, 1): True}
    report = backlog.group_backlog(
        backlog.checkpoint_states(keys, _queues(spark, {0: 0}), grace_ms=GRACE_MS),
        spark.createDataFrame([], schemas.GROUP_RETRY),
        backlog.orphan_acks(keys),
    ).select("group", "unacked_messages", "duplicate_acks", "orphan_acks")
    assertDataFrameEqual(
        report,
        spark.createDataFrame(
            [("g", 0, 2, 1)],
            "group string, unacked_messages long, duplicate_acks long, orphan_acks long",
        ),
    )


def test_change_invisible_chain_keeps_only_the_new_checkpoint(spark: SparkSession) -> None:
    first, second = NOW - 50_000, NOW - 20_000
    states = _states(
        spark,
        [
            ck(0, [5, 6], pop_time_ms=first, invisible_ms=30_000),
            # changeInvisibleTime(6): a new one-message CK, then the old handle acked
            ck(1, [6], pop_time_ms=second, invisible_ms=120_000),
            ack(2, [6], start=5, pop_time_ms=first),
        ],
    )
    assert _acked(states) == {(first, 5): False, (first, 6): True, (second, 6): False}
    overdue = {(r.pop_time_ms, r.message_queue_offset): r.overdue for r in states.collect()}
    assert overdue == {(first, 5): True, (first, 6): True, (second, 6): False}


def test_group_backlog_overdue_ages_and_retry_depths(spark: SparkSession) -> None:
    rows = [
        ck(0, [0], pop_time_ms=NOW - 2_000_000, invisible_ms=30_000),  # resolved (< progress)
        ck(1, [1, 2], pop_time_ms=NOW - 90_000, invisible_ms=60_000),  # overdue, 2 msgs
        ck(1, [1, 2], pop_time_ms=NOW - 90_000, invisible_ms=60_000),  # written twice
        ck(2, [3], pop_time_ms=NOW - 5_000, invisible_ms=60_000),  # waiting
        ck(3, [4], pop_time_ms=NOW - 59_500, invisible_ms=60_000, bitmap=1),  # fully acked
        ck(4, [9], pop_time_ms=NOW - 61_000, invisible_ms=60_000),  # due, within the grace
        ck(0, [0, 1], pop_time_ms=NOW - 7_200_000, group="h", revive_queue_id=1),
    ]
    retry = spark.createDataFrame(
        [("h:1", "b0", "g", 3, 1, NOW), ("h:1", "b0", "dlq-only", 0, 4, NOW)], schemas.GROUP_RETRY
    )
    queues = _queues(spark, {0: 1, 1: None})
    keys = _keys(spark, rows)
    states = backlog.checkpoint_states(keys, queues, grace_ms=GRACE_MS)
    report = backlog.group_backlog(states, retry, backlog.orphan_acks(keys))
    columns = (
        "group", "unacked_checkpoints", "unacked_messages", "overdue_checkpoints",
        "overdue_messages", "oldest_unacked_age_ms", "age_lt_10s", "age_lt_1m", "age_lt_10m",
        "age_lt_1h", "age_ge_1h", "retry_messages", "dlq_messages",
    )  # fmt: skip
    assertDataFrameEqual(
        report.select(*columns),
        spark.createDataFrame(
            [
                ("g", 3, 4, 1, 2, 90_000, 1, 0, 3, 0, 0, 3, 1),
                ("h", 1, 2, 1, 2, 7_200_000, 0, 0, 0, 0, 2, 0, 0),
                ("dlq-only", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4),
            ],
            ", ".join(f"{c} {'string' if c == 'group' else 'long'}" for c in columns),
        ),
    )
    assertDataFrameEqual(
        backlog.revive_queue_report(queues, states).select(
            "revive_queue_id", "revive_queue_offset", "backlog_checkpoints", "overdue_checkpoints"
        ),
        spark.createDataFrame(
            [(0, 1, 3, 1), (1, None, 1, 1)],
            "revive_queue_id int, revive_queue_offset long, backlog_checkpoints long, "
            "overdue_checkpoints long",
        ),
    )
    totals = backlog.group_totals(report).filter("group = 'g'").select("unacked_messages")
    assert totals.collect()[0].unacked_messages == 4


def _random_log(seed: int, checkpoints: int) -> list[tuple[object, ...]]:
    """CKs of 1-32 messages with gaps, bitmaps, CKs written twice, ACK and BATCH_ACK
    records before and after their CK, duplicate acks and acks of offsets the CK lacks."""
    rng = random.Random(seed)
    rows: list[tuple[object, ...]] = []
    position = 0
    for index in range(checkpoints):
        revive_queue_id = rng.randrange(3)
        start = rng.randrange(10_000)
        offsets = sorted(rng.sample(range(start, start + 64), rng.randint(1, 32)))
        offsets[0] = start
        bitmap = rng.getrandbits(len(offsets)) if rng.random() < 0.5 else 0
        pop_time = NOW - rng.randrange(3_600_000)
        group = f"g{index % 4}"
        acks = [
            ack(
                0,
                rng.sample([*offsets, start + 64], rng.randint(1, 2)),
                start=start,
                pop_time_ms=pop_time,
                group=group,
                revive_queue_id=revive_queue_id,
            )
            for _ in range(rng.randrange(4))
        ]
        bitmaps = [bitmap] + ([rng.getrandbits(len(offsets))] if rng.random() < 0.1 else [])
        checkpoints_of_key = [
            ck(
                0,
                offsets,
                bitmap=b,
                pop_time_ms=pop_time,
                group=group,
                revive_queue_id=revive_queue_id,
            )
            for b in bitmaps
        ]
        before = rng.randrange(len(acks) + 1)
        entries = [*acks[:before], checkpoints_of_key[0], *acks[before:], *checkpoints_of_key[1:]]
        for entry in entries:
            rows.append((*entry[:3], position, position + 1, *entry[5:]))
            position += 1
    return rows


def test_checkpoint_states_sum_the_message_states(spark: SparkSession) -> None:
    """The reports' per-CK bit arithmetic says what the per-message rules say."""
    rows = _random_log(seed=16, checkpoints=400)
    log = _log(spark, rows)
    queues = _queues(spark, {0: 40, 1: None, 2: 0})
    messages = sql_reference.message_states(log, queues, grace_ms=GRACE_MS)
    summed = messages.groupBy(*backlog.CK_KEY).agg(
        sf.sum(sf.when(~sf.col("acked"), 1).otherwise(0)).cast("long").alias("unacked"),
        sf.sum("duplicate_acks").cast("long").alias("duplicate_acks"),
        sf.max("overdue").alias("overdue"),
        sf.max("age_ms").alias("age_ms"),
    )
    keys = _keys(spark, rows)
    assert backlog.records_read(keys) == len(rows)
    per_ck = backlog.checkpoint_states(keys, queues, grace_ms=GRACE_MS).select(*summed.columns)
    assert per_ck.count() > 300
    assert per_ck.filter("unacked > 0 AND unacked < 32").count() > 100
    assert per_ck.filter("duplicate_acks > 0").count() > 10
    assertDataFrameEqual(per_ck, summed)
