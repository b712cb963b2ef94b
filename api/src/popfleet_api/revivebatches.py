"""Revive-log records as Arrow record batches: the columns of ``ScanReviveLogBatches``.

``ScanReviveLog`` sends one protobuf message per record; a reader that wants
millions of them (the audit jobs) pays per record on both sides. The batch RPC
carries the same records thousands at a time as one Arrow IPC stream per
message (``ReviveLogBatch.arrow_ipc``, format ``REVIVE_BATCH_FORMAT_ARROW_IPC_V1``):
the broker builds the columns without a Python object per record, and a reader
hands them to Arrow consumers (PySpark) as they are.

Format version 1, one row per record in position order, columns in this order
(``queue_offsets`` is a list whose items are named ``element`` and never null,
as PySpark's Arrow schema for ``array<bigint>`` says):

    column              type          set for
    queue_offset        int64         every record: its position in the revive queue
    store_timestamp_ms  int64         every record
    kind                int8          every record: the ``ReviveRecordKind`` number
                                      (1 CHECKPOINT, 2 ACK, 3 BATCH_ACK, 4 DELAY, 5 MALFORMED)
    tag                 string        every record (``ck``, ``ack``, ``bAck``, ``delay``, other)
    topic               string        CK, ACK, DELAY (the delivery target)
    group               string        CK, ACK
    queue_id            int32         CK, ACK, DELAY
    start_queue_offset  int64         CK, ACK
    pop_time_ms         int64         CK, ACK
    invisible_ms        int64         CK
    revive_time_ms      int64         CK: pop_time_ms + invisible_ms
    ack_bitmap          int64         CK
    queue_offsets       list<int64>   CK: every message's queue offset; ACK: the acked ones
    broker_name         string        CK: its broker; ACK: its ``bn``, null when absent
                                      (the local broker, upstream #8460)
    reput_times         int32         CK
    deliver_time_ms     int64         DELAY
    malformed_reason    string        MALFORMED

Every other cell is null. A record's resume position is ``queue_offset + 1``;
the revive queue id is the message's. Values are those ``ScanReviveLog`` sends
for the same record, so the two RPCs are interchangeable (tests compare them).
A change that an older reader would misread needs a new format number.

:func:`batch_from_records` builds the same batch from ``ScanReviveLog``'s
records: the client's fallback against a broker without the batch RPC.

Callers: the broker's admin server (``popbroker.inspect.revivecolumns`` builds the
columns), :class:`popfleet_api.client.BrokerAdmin` (decodes them), the audit jobs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from popfleet_api import models

FORMAT_VERSION = 1
KIND_CODES: dict[models.ReviveRecordKind, int] = {
    models.ReviveRecordKind.CHECKPOINT: 1,
    models.ReviveRecordKind.ACK: 2,
    models.ReviveRecordKind.BATCH_ACK: 3,
    models.ReviveRecordKind.DELAY: 4,
    models.ReviveRecordKind.MALFORMED: 5,
}
# kind code -> name, indexable by the code (0 is never sent)
KIND_NAMES: tuple[str, ...] = ("UNSPECIFIED", *(kind.value for kind in KIND_CODES))
QUEUE_OFFSETS_TYPE = pa.list_(pa.field("element", pa.int64(), nullable=False))

SCHEMA = pa.schema(
    [
        pa.field("queue_offset", pa.int64(), nullable=False),
        pa.field("store_timestamp_ms", pa.int64(), nullable=False),
        pa.field("kind", pa.int8(), nullable=False),
        pa.field("tag", pa.string(), nullable=False),
        pa.field("topic", pa.string()),
        pa.field("group", pa.string()),
        pa.field("queue_id", pa.int32()),
        pa.field("start_queue_offset", pa.int64()),
        pa.field("pop_time_ms", pa.int64()),
        pa.field("invisible_ms", pa.int64()),
        pa.field("revive_time_ms", pa.int64()),
        pa.field("ack_bitmap", pa.int64()),
        pa.field("queue_offsets", QUEUE_OFFSETS_TYPE),
        pa.field("broker_name", pa.string()),
        pa.field("reput_times", pa.int32()),
        pa.field("deliver_time_ms", pa.int64()),
        pa.field("malformed_reason", pa.string()),
    ]
)
COLUMNS: tuple[str, ...] = tuple(SCHEMA.names)


class BatchFormatError(ValueError):
    """Batch bytes that are not an Arrow IPC stream of this module's schema."""


@dataclass(frozen=True, slots=True)
class ReviveLogBatch:
    """One message of ``ScanReviveLogBatches``: records (``SCHEMA``) and resume positions."""

    revive_queue_id: int
    records: Any  # pyarrow.RecordBatch with SCHEMA
    next_queue_offset: int
    min_queue_offset: int
    max_queue_offset: int
    end_of_log: bool


def empty() -> Any:
    """A record batch of ``SCHEMA`` without rows."""
    return pa.RecordBatch.from_pylist([], schema=SCHEMA)


def to_ipc(batch: Any) -> bytes:
    """One Arrow IPC stream (schema + ``batch``), the bytes of ``ReviveLogBatch.arrow_ipc``."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, SCHEMA) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def from_ipc(data: bytes, *, record_count: int) -> Any:
    """The record batch in ``data``; ``BatchFormatError`` unless it is ``record_count`` rows
    of exactly ``SCHEMA``."""
    if record_count == 0 and not data:
        return empty()
    try:
        table = pa.ipc.open_stream(pa.py_buffer(data)).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise BatchFormatError(f"not an Arrow IPC stream: {exc}") from None
    if not table.schema.equals(SCHEMA):
        raise BatchFormatError(f"unexpected batch schema: {table.schema}")
    if table.num_rows != record_count:
        raise BatchFormatError(f"{table.num_rows} records, the message says {record_count}")
    batches = table.combine_chunks().to_batches()
    return batches[0] if batches else empty()


def _row(record: models.ReviveRecord) -> dict[str, object]:
    row: dict[str, object] = dict.fromkeys(COLUMNS)
    row.update(
        queue_offset=record.queue_offset,
        store_timestamp_ms=record.store_timestamp_ms,
        kind=KIND_CODES[record.kind],
        tag=record.tag,
    )
    ck, ack, delay = record.checkpoint, record.ack, record.delay
    if ck is not None:
        row.update(
            topic=ck.topic, group=ck.group, queue_id=ck.queue_id,
            start_queue_offset=ck.start_queue_offset, pop_time_ms=ck.pop_time_ms,
            invisible_ms=ck.invisible_ms, revive_time_ms=ck.revive_time_ms,
            ack_bitmap=ck.ack_bitmap, queue_offsets=list(ck.queue_offsets),
            broker_name=ck.broker_name, reput_times=ck.reput_times,
        )  # fmt: skip
    elif ack is not None:
        row.update(
            topic=ack.topic, group=ack.group, queue_id=ack.queue_id,
            start_queue_offset=ack.start_queue_offset, pop_time_ms=ack.pop_time_ms,
            queue_offsets=list(ack.ack_queue_offsets), broker_name=ack.broker_name,
        )  # fmt: skip
    elif delay is not None:
        row.update(
            topic=delay.topic, queue_id=delay.queue_id, deliver_time_ms=delay.deliver_time_ms
        )
    else:
        row["malformed_reason"] = record.malformed_reason
    return row


def batch_from_records(records: Sequence[models.ReviveRecord]) -> Any:
    """The batch ``ScanReviveLogBatches`` would send for ``records`` (one Python row each)."""
    return pa.RecordBatch.from_pylist([_row(r) for r in records], schema=SCHEMA)
