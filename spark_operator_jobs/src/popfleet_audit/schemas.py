"""Explicit schemas of the ``popfleet`` data source tables and of the audit reports.

Column names follow the admin API (``_ms`` times in ms since the epoch,
``queue_offset`` for a consume-queue index). Every table row carries the admin
endpoint it was read from (``broker``), the broker's name (``broker_name``) and
the broker's clock when the read was planned (``broker_now_ms``): ages are
measured against the broker's clock, never the executor's.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)


def _fields(*spec: tuple[str, object, bool]) -> StructType:
    return StructType([StructField(name, kind, nullable) for name, kind, nullable in spec])  # type: ignore[arg-type]


_S, _I, _L, _B = StringType(), IntegerType(), LongType(), BooleanType()

REVIVE_LOG = _fields(
    ("broker", _S, False),
    ("broker_name", _S, False),
    ("revive_queue_id", _I, False),
    ("queue_offset", _L, False),
    ("next_queue_offset", _L, False),
    ("store_timestamp_ms", _L, False),
    ("kind", _S, False),  # CHECKPOINT, ACK, BATCH_ACK, DELAY, MALFORMED
    ("tag", _S, False),
    ("topic", _S, True),
    ("group", _S, True),
    ("queue_id", _I, True),
    ("start_queue_offset", _L, True),
    ("pop_time_ms", _L, True),
    ("invisible_ms", _L, True),  # CK only
    ("revive_time_ms", _L, True),  # CK only
    ("ack_bitmap", _L, True),  # CK only
    ("queue_offsets", ArrayType(LongType(), containsNull=False), True),  # CK: all; ACK: acked
    ("ck_broker_name", _S, True),  # the CK's broker; an ACK without one: the local broker
    ("reput_times", _I, True),  # CK only
    ("broker_now_ms", _L, False),
)

OFFSETS = _fields(
    ("broker", _S, False),
    ("broker_name", _S, False),
    ("group", _S, False),
    ("topic", _S, False),
    ("queue_id", _I, False),
    ("committed_queue_offset", _L, False),
    ("min_queue_offset", _L, False),
    ("max_queue_offset", _L, False),
    ("queue_exists", _B, False),
    ("in_flight_messages", _L, True),
    ("oldest_unconsumed_store_time_ms", _L, True),
    ("broker_now_ms", _L, False),
)

REVIVE_QUEUES = _fields(
    ("broker", _S, False),
    ("broker_name", _S, False),
    ("revive_queue_id", _I, False),
    ("min_queue_offset", _L, False),
    ("max_queue_offset", _L, False),
    ("revive_queue_offset", _L, True),
    ("lag_messages", _L, False),
    ("lag_ms", _L, False),
    ("broker_now_ms", _L, False),
)

GROUP_RETRY = _fields(
    ("broker", _S, False),
    ("broker_name", _S, False),
    ("group", _S, False),
    ("retry_messages", _L, False),
    ("dlq_messages", _L, False),
    ("broker_now_ms", _L, False),
)

# One row per CK key, orphan key or revive queue of a revive-log partition: the revive
# log matched where it is read (popfleet_audit.ckmatch, which owns the Arrow twin).
REVIVE_KEYS = _fields(
    ("row_kind", _S, False),  # checkpoint, orphan, revive_queue
    ("broker_name", _S, False),
    ("revive_queue_id", _I, False),
    ("topic", _S, True),
    ("group", _S, True),
    ("queue_id", _I, True),
    ("start_queue_offset", _L, True),
    ("pop_time_ms", _L, True),
    ("ck_broker_name", _S, True),
    ("ck_position", _L, True),  # checkpoint: its first CK's position
    ("revive_time_ms", _L, True),
    ("broker_now_ms", _L, True),
    ("messages", _I, True),
    ("in_ck", _L, True),  # acked bits of the CKs' bitmaps
    ("by_records", _L, True),  # bits acked by ACK entries after the CK
    ("matching_entries", _L, True),  # ACK entries after the CK naming one of its messages
    ("orphan_entries", _L, True),  # orphan: ACK entries of a key without a CK
    ("records", _L, True),  # revive_queue: records read
)

TABLES: dict[str, StructType] = {
    "revive_log": REVIVE_LOG,
    "revive_keys": REVIVE_KEYS,
    "offsets": OFFSETS,
    "revive_queues": REVIVE_QUEUES,
    "group_retry": GROUP_RETRY,
}

# One row per (audit run, broker, group, topic, queue): the lag history table.
LAG_HISTORY = _fields(
    ("run_id", _S, False),
    ("audited_at_ms", _L, False),
    ("broker_name", _S, False),
    ("group", _S, False),
    ("topic", _S, False),
    ("queue_id", _I, False),
    ("committed_queue_offset", _L, False),
    ("max_queue_offset", _L, False),
    ("lag_messages", _L, False),
    ("time_lag_ms", _L, False),
    ("in_flight_messages", _L, False),
)
