"""CK/ACK matching of one revive queue's records, vectorized: the audit's hot loop.

The ``popfleet`` data source's ``revive_keys`` table runs :func:`match_batches` on
each revive-log partition as it reads it. A CK and every ACK of it live in the same
revive queue, and a partition is one whole (broker, revive queue), so the matching
is an aggregation pushed down to the partition: nothing is shuffled, and a record
never becomes a Spark row. The rules are :mod:`popfleet_audit.backlog`'s steps 1-3
(a Spark SQL formulation, ``tests/unit/audit/sql_reference.py``, is the reference
the tests compare this with):

  1. Rows are grouped by the CK key (the eight ``backlog.CK_KEY`` columns, compared as
     values, never as a joined string) and ordered by position within a key.
  2. A key with CK records: its first CK gives the position and the messages
     (``queue_offsets``); revive time is the minimum, the broker clock the maximum and
     the bitmap the union over its CKs.
  3. Each offset of an ACK/BATCH_ACK record after that position is looked up among the
     messages (offsets of a CK are distinct and increasing); a match sets the
     message's bit in ``by_records`` and counts in ``matching_entries``.
  4. A key without any CK is an orphan: its ACK entries are counted.
  5. Each (broker, revive queue) read is one ``revive_queue`` row with its record count.

Output rows: :data:`schemas.REVIVE_KEYS`; ``row_kind`` is ``checkpoint``, ``orphan``
or ``revive_queue``. Pure pyarrow and numpy: tested without a Spark job.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema

from popfleet_audit import schemas

CK_KEY = (
    "broker_name", "revive_queue_id", "topic", "group", "queue_id", "start_queue_offset",
    "pop_time_ms", "ck_broker_name",
)  # fmt: skip
MAX_MESSAGES = 62  # bits of a signed long left for a CK's messages (the broker allows 32)

KEYS_ARROW_SCHEMA = to_arrow_schema(schemas.REVIVE_KEYS, timezone="UTC")
READ_COLUMNS = (*CK_KEY, "kind", "queue_offset", "revive_time_ms", "ack_bitmap", "queue_offsets",
         "broker_now_ms")  # fmt: skip


def match_batches(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """One partition's revive-log batches (a whole revive queue) in, its key rows out."""
    received = [batch for batch in batches if batch.num_rows]
    if received:
        yield from match(pa.Table.from_batches(received)).to_batches()


def _codes(column: Any) -> np.ndarray:
    """A column as int64 codes that compare equal exactly when the values do (null: -1)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = pc.dictionary_encode(column).indices
    return np.asarray(pc.fill_null(column.cast(pa.int64()), -1))


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(start, start + length)`` for each pair."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    firsts = np.cumsum(lengths) - lengths
    return np.repeat(starts - firsts, lengths) + np.arange(total, dtype=np.int64)


def _lists(column: Any, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The list values of ``rows`` of a list column: (lengths per row, values in row order);
    a null list has length 0."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    offsets = np.asarray(array.offsets)
    values = np.asarray(array.values)
    lengths = np.where(np.asarray(array.is_valid())[rows], offsets[rows + 1] - offsets[rows], 0)
    return lengths, values[_ranges(offsets[rows], lengths)]


def match(table: pa.Table) -> pa.Table:
    """Key rows (module docstring) of one partition's revive-log rows."""
    table = table.select(list(READ_COLUMNS))
    kinds = table.column("kind")
    is_ck_all = np.asarray(pc.equal(kinds, "CHECKPOINT"))
    is_ack_all = np.asarray(pc.is_in(kinds, pa.array(["ACK", "BATCH_ACK"])))
    keep = np.flatnonzero(is_ck_all | is_ack_all)
    queues = _revive_queue_rows(table)
    if keep.size == 0:
        return queues
    table = table.take(keep).combine_chunks()
    is_ck = is_ck_all[keep]
    position = np.asarray(table.column("queue_offset"))
    codes = [_codes(table.column(name)) for name in CK_KEY]
    order = np.lexsort((position, *reversed(codes)))
    codes = [c[order] for c in codes]
    is_ck, position = is_ck[order], position[order]
    new_key = np.zeros(len(order), bool)
    new_key[0] = True
    for c in codes:
        new_key[1:] |= c[1:] != c[:-1]
    key_of = np.cumsum(new_key) - 1  # per sorted row: its key's number
    key_count = int(key_of[-1]) + 1
    first_row = np.flatnonzero(new_key)  # per key: its first sorted row

    # 2. keys with CKs: first CK, min revive time, max clock, bitmap union
    ck_rows = np.flatnonzero(is_ck)
    ck_keys, ck_first = np.unique(key_of[ck_rows], return_index=True)
    has_ck = np.zeros(key_count, bool)
    has_ck[ck_keys] = True
    first_ck = order[ck_rows[ck_first]]  # table rows of each CK key's first CK
    sorted_ck = order[ck_rows]

    def reduce(ufunc: Any, name: str, fill: int) -> np.ndarray:
        values = np.asarray(pc.fill_null(table.column(name), fill).take(pa.array(sorted_ck)))
        return ufunc.reduceat(values, ck_first) if len(ck_first) else np.zeros(0, np.int64)

    ck_position = position[ck_rows[ck_first]]
    revive_time = reduce(np.minimum, "revive_time_ms", np.iinfo(np.int64).max)
    broker_now = reduce(np.maximum, "broker_now_ms", np.iinfo(np.int64).min)
    bitmap = reduce(np.bitwise_or, "ack_bitmap", 0)
    messages, message_offsets = _lists(table.column("queue_offsets"), first_ck)
    if messages.size and messages.max() > MAX_MESSAGES:
        raise ValueError(f"a checkpoint of {messages.max()} messages (at most {MAX_MESSAGES})")
    in_ck = bitmap & ((np.ones_like(messages, dtype=np.int64) << messages) - 1)
    ck_index = np.full(key_count, -1, np.int64)  # key number -> index among CK keys
    ck_index[ck_keys] = np.arange(len(ck_keys))
    message_ck = np.repeat(np.arange(len(ck_keys)), messages)  # per CK message: its CK key
    message_bit = np.arange(message_ck.size) - np.repeat(np.cumsum(messages) - messages, messages)

    # 3. ACK entries after their key's first CK, looked up among its messages
    ack_rows = np.flatnonzero(~is_ck)
    ack_keys = key_of[ack_rows]
    after = has_ck[ack_keys]
    after[after] = position[ack_rows[after]] > ck_position[ck_index[ack_keys[after]]]
    lengths, entries = _lists(table.column("queue_offsets"), order[ack_rows[after]])
    entry_ck = np.repeat(ck_index[ack_keys[after]], lengths)
    by_records = np.zeros(len(ck_keys), np.int64)
    matching = np.zeros(len(ck_keys), np.int64)
    if entries.size and message_offsets.size:
        # (CK, offset) pairs as one sortable number: offsets by rank, CKs above them
        ranks = np.unique(np.concatenate((message_offsets, entries)), return_inverse=True)[1]
        span = int(ranks.max()) + 1
        message_pairs = message_ck * span + ranks[: message_offsets.size]
        entry_pairs = entry_ck * span + ranks[message_offsets.size :]
        found = np.searchsorted(message_pairs, entry_pairs)
        found = np.minimum(found, message_pairs.size - 1)
        hit = message_pairs[found] == entry_pairs
        hit_ck, hit_bit = entry_ck[hit], message_bit[found[hit]]
        np.bitwise_or.at(by_records, hit_ck, np.int64(1) << hit_bit)
        matching = np.bincount(hit_ck, minlength=len(ck_keys)).astype(np.int64)

    # 4. orphans: ACK entries of keys without a CK
    orphan_acks = ack_rows[~has_ck[ack_keys]]
    orphan_lengths, _ = _lists(table.column("queue_offsets"), order[orphan_acks])
    orphan_keys = np.flatnonzero(~has_ck)
    orphan_entries = np.bincount(
        key_of[orphan_acks], weights=orphan_lengths, minlength=key_count
    ).astype(np.int64)[orphan_keys]

    checkpoints = _key_rows(table, first_ck, row_kind="checkpoint", values={
        "ck_position": ck_position, "revive_time_ms": revive_time, "broker_now_ms": broker_now,
        "messages": messages.astype(np.int32), "in_ck": in_ck, "by_records": by_records,
        "matching_entries": matching,
    })  # fmt: skip
    orphans = _key_rows(
        table,
        order[first_row[orphan_keys]],
        row_kind="orphan",
        values={"orphan_entries": orphan_entries},
    )
    return pa.concat_tables([checkpoints, orphans, queues])


def _key_rows(
    table: pa.Table, rows: np.ndarray, *, row_kind: str, values: dict[str, Any]
) -> pa.Table:
    keys = table.select(list(CK_KEY)).take(pa.array(rows, pa.int64()))
    columns = {"row_kind": pa.repeat(pa.scalar(row_kind), len(rows))}
    for field in KEYS_ARROW_SCHEMA:
        if field.name in CK_KEY:
            columns[field.name] = keys.column(field.name).cast(field.type)
        elif field.name in values:
            columns[field.name] = pa.array(values[field.name], field.type)
        elif field.name != "row_kind":
            columns[field.name] = pa.nulls(len(rows), field.type)
    return pa.table(columns, schema=KEYS_ARROW_SCHEMA)


def _revive_queue_rows(table: pa.Table) -> pa.Table:
    seen = table.group_by(["broker_name", "revive_queue_id"]).aggregate([([], "count_all")])
    rows = seen.num_rows
    columns = {field.name: pa.nulls(rows, field.type) for field in KEYS_ARROW_SCHEMA}
    columns["row_kind"] = pa.repeat(pa.scalar("revive_queue"), rows)
    columns["broker_name"] = seen.column("broker_name").cast(pa.string())
    columns["revive_queue_id"] = seen.column("revive_queue_id").cast(pa.int32())
    columns["records"] = seen.column("count_all").cast(pa.int64())
    return pa.table(columns, schema=KEYS_ARROW_SCHEMA)
