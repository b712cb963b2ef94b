"""Revive-log messages as one Arrow record batch (``popfleet_api.revivebatches``), decoded in bulk.

``ScanReviveLogBatches`` sends thousands of records per message. Decoding each
record into a Python object (:func:`popbroker.pop.revivelog.decode`) costs more
than reading it from the store, so the JSON bodies of a batch are parsed in one
call by Arrow's JSON reader and checked column by column. The result must be
*exactly* what the per-record decoder says for every record, so, as numbered steps:

  1. A ``ck``/``ack``/``bAck`` record whose body is "plain" -- 2..``MAX_RECORD_BYTES``
     bytes, ``{`` first and ``}`` last, no newline, carriage return or backslash (so
     no escaped key can hide from step 4), valid UTF-8 -- is a candidate for the
     bulk path. Everything else (delays, unknown tags, odd bodies) takes the
     per-record path.
  2. The candidates' bodies, one per line, are parsed with an explicit schema
     (unknown keys ignored). Arrow refuses what the per-record decoder refuses
     for type reasons (a float, string or boolean where an integer belongs,
     duplicate keys, integers beyond int64); if the parse fails or does not
     give one row per body, every candidate takes the per-record path.
  3. Each row is checked with the decoder's rules, column-wise: required keys
     present (not null), integers ``>= 0``, names 1..``MAX_NAME_CHARS``
     characters, ``n == len(d)``, 1..32 strictly increasing diffs, the bitmap
     within the count, ``ao == -1`` and 1..32 offsets for ``bAck``, a version
     ``>= 1``. A row that fails any rule takes the per-record path (which
     names the reason).
  4. A row whose optional ``v`` (or, for acks, ``bn``) is null is checked for the
     key in its body: ``"v":null`` is malformed to the decoder, absent is not.
  5. Values the batch columns cannot hold -- a queue id or reput count beyond
     int32, a revive time or start + diff beyond int64 -- make the record MALFORMED on either
     path (:func:`out_of_range`), as they do in ``ScanReviveLog``.

The per-record path builds a row per record from the decoder's value. Rows of
both paths are put back in position order. ``tests/unit/broker`` compares the
two paths on generated bodies (hypothesis).

Callers: :mod:`popbroker.admin.scanning` (``ScanReviveLogBatches``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from popbroker.pop import records, revivelog
from popbroker.pop.checkpoints import MAX_CHECKPOINT_MESSAGES, Checkpoint
from popbroker.store.api import PROPERTY_TAGS, MessageColumns
from popfleet_api import revivebatches as rb

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
_JSON_TAGS = {records.CK_TAG: 1, records.ACK_TAG: 2, records.BATCH_ACK_TAG: 3}
_I64 = pa.int64()
_BODY_SCHEMA = pa.schema(
    [(key, _I64) for key in ("v", "so", "pt", "it", "bm", "n", "q", "rp", "ao")]
    + [(key, pa.string()) for key in ("t", "c", "bn")]
    + [(key, pa.list_(_I64)) for key in ("d", "aol")]
)
_PARSE = pajson.ParseOptions(explicit_schema=_BODY_SCHEMA, unexpected_field_behavior="ignore")


def out_of_range(decoded: revivelog.Decoded) -> str | None:
    """Why a decoded record does not fit the admin API's fields (int32/int64), else None."""
    if isinstance(decoded, Checkpoint):
        if decoded.queue_id > INT32_MAX or decoded.reput_times > INT32_MAX:
            return "ck record: queue id or reput times beyond int32"
        if decoded.pop_time_ms + decoded.invisible_ms > INT64_MAX:
            return "ck record: revive time beyond int64"
        if decoded.start_queue_offset + decoded.queue_offset_diffs[-1] > INT64_MAX:
            return "ck record: a queue offset beyond int64"
    elif isinstance(decoded, records.AckRecord):
        if decoded.queue_id > INT32_MAX:
            return "ack record: queue id beyond int32"
    elif isinstance(decoded, revivelog.Delay) and (
        decoded.queue_id > INT32_MAX or decoded.deliver_ms > INT64_MAX
    ):
        return "delay record: queue id beyond int32 or delivery time beyond int64"
    return None


def _plain(body: bytes) -> bool:
    return b"\n" not in body and _plain_text(body)


def _utf8(body: bytes) -> bool:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# ---------------------------------------------------------------- the per-record path


def _slow_row(read: MessageColumns, index: int, revive_queue_id: int) -> dict[str, object]:
    row: dict[str, object] = dict.fromkeys(rb.COLUMNS)
    row.update(
        queue_offset=read.queue_offsets[index],
        store_timestamp_ms=read.store_timestamps_ms[index],
    )
    properties = read.properties[index]
    tag = properties.get(PROPERTY_TAGS, "")
    row["tag"] = tag
    decoded = revivelog.decode(tag, properties, read.bodies[index], revive_queue_id=revive_queue_id)
    reason = out_of_range(decoded)
    if reason is not None:
        decoded = revivelog.Malformed(reason)
    if isinstance(decoded, Checkpoint):
        row.update(
            kind=1, topic=decoded.topic, group=decoded.group, queue_id=decoded.queue_id,
            start_queue_offset=decoded.start_queue_offset, pop_time_ms=decoded.pop_time_ms,
            invisible_ms=decoded.invisible_ms, revive_time_ms=decoded.revive_time_ms,
            ack_bitmap=decoded.ack_bitmap, broker_name=decoded.broker_name,
            queue_offsets=[decoded.start_queue_offset + d for d in decoded.queue_offset_diffs],
            reput_times=decoded.reput_times,
        )  # fmt: skip
    elif isinstance(decoded, records.AckRecord):
        row.update(
            kind=3 if decoded.is_batch else 2, topic=decoded.topic, group=decoded.group,
            queue_id=decoded.queue_id, start_queue_offset=decoded.start_queue_offset,
            pop_time_ms=decoded.pop_time_ms, broker_name=decoded.broker_name,
            queue_offsets=list(decoded.ack_queue_offsets),
        )  # fmt: skip
    elif isinstance(decoded, revivelog.Delay):
        row.update(
            kind=4, topic=decoded.topic, queue_id=decoded.queue_id,
            deliver_time_ms=decoded.deliver_ms,
        )  # fmt: skip
    else:
        row.update(kind=5, malformed_reason=decoded.reason)
    return row


def _slow_table(read: MessageColumns, indexes: Sequence[int], revive_queue_id: int) -> Any:
    rows = [_slow_row(read, i, revive_queue_id) for i in indexes]
    return pa.Table.from_pylist(rows, schema=rb.SCHEMA)


def batch_of_records(read: MessageColumns, *, revive_queue_id: int) -> Any:
    """The same batch as :func:`batch_of`, every record through the per-record decoder."""
    indexes = range(len(read.queue_offsets))
    batches = _slow_table(read, indexes, revive_queue_id).combine_chunks().to_batches()
    return batches[0] if batches else rb.empty()


def bulk_decodable(read: MessageColumns) -> int:
    """How many records of ``read`` :func:`batch_of` decodes in bulk (steps 1-4): for tests."""
    candidates, kind_codes, _, joined = _candidates(read)
    bodies = [read.bodies[i] for i in candidates]
    table = _parse(joined, len(bodies)) if bodies else None
    if table is None:
        return 0
    kinds = pa.array(kind_codes, pa.int64())
    suspects = _null_key_in_body(table, kinds, bodies)
    mask = _checked(table, kinds).to_pylist()
    return sum(1 for i, ok in enumerate(mask) if ok and i not in suspects)


# ---------------------------------------------------------------- the bulk path


def _parse(joined: bytes, count: int) -> Any | None:
    """Step 2: ``count`` newline-joined bodies as one record batch (a row each), or None."""
    options = pajson.ReadOptions(use_threads=False, block_size=max(1 << 20, len(joined) + 1))
    try:
        table = pajson.read_json(
            pa.BufferReader(joined), read_options=options, parse_options=_PARSE
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if table.num_rows != count:
        return None
    return pa.RecordBatch.from_arrays(
        [column.combine_chunks() for column in table.columns], schema=table.schema
    )


def _all(*masks: Any) -> Any:
    result = masks[0]
    for mask in masks[1:]:
        result = pc.and_kleene(result, mask)
    return pc.fill_null(result, False)


def _nonneg(table: Any, *keys: str) -> list[Any]:
    return [pc.greater_equal(table[key], 0) for key in keys]


def _name(table: Any, key: str) -> Any:
    return pc.and_kleene(
        pc.greater_equal(pc.utf8_length(table[key]), 1),
        pc.less_equal(pc.utf8_length(table[key]), records.MAX_NAME_CHARS),
    )


def _list_ok(values: Any, *, increasing: bool, limits: Any = None) -> Any:
    """Per row: 1..32 items, none null, negative or above the row's limit (when given),
    strictly increasing when asked. A null list has no items."""
    column = values
    lengths = pc.fill_null(pc.list_value_length(column), 0)
    ok = _all(pc.greater_equal(lengths, 1), pc.less_equal(lengths, MAX_CHECKPOINT_MESSAGES))
    flat = pc.list_flatten(column)
    parents = pc.list_parent_indices(column)
    good_item = pc.greater_equal(flat, 0)
    if limits is not None:
        good_item = pc.and_kleene(good_item, pc.less_equal(flat, pc.take(limits, parents)))
    bad_item = pc.invert(pc.fill_null(good_item, False))
    bad_rows = [pc.filter(parents, bad_item)]
    if increasing and len(flat) > 1:
        same_row = pc.equal(parents[1:], parents[:-1])
        not_up = pc.fill_null(pc.less_equal(flat[1:], flat[:-1]), True)
        bad_rows.append(pc.filter(parents[1:], pc.and_(same_row, not_up)))
    bad = pa.chunked_array(bad_rows, type=parents.type)
    return pc.and_(ok, pc.invert(pc.is_in(pa.array(range(len(column)), pa.int64()), bad)))


def _checked(table: Any, kinds: Any) -> Any:
    """Step 3: a row mask of bodies the decoder accepts (optional keys still to be checked)."""
    common = [
        *_nonneg(table, "so", "pt", "q"),
        pc.less_equal(table["q"], INT32_MAX),
        _name(table, "t"),
        _name(table, "c"),
        pc.or_kleene(pc.is_null(table["v"]), pc.greater_equal(table["v"], 1)),
    ]
    ck = _all(
        pc.equal(kinds, 1),
        *common,
        *_nonneg(table, "it", "bm", "n", "rp"),
        pc.less_equal(table["rp"], INT32_MAX),
        pc.less_equal(table["pt"], pc.subtract(pa.scalar(INT64_MAX), table["it"])),
        _name(table, "bn"),
        pc.equal(table["n"], pc.list_value_length(table["d"])),
        pc.less(table["bm"], pc.shift_left(pa.scalar(1), pc.list_value_length(table["d"]))),
        _list_ok(
            table["d"],
            increasing=True,
            limits=pc.subtract(pa.scalar(INT64_MAX), pc.fill_null(table["so"], 0)),
        ),
    )
    bn_ok = pc.or_kleene(pc.is_null(table["bn"]), _name(table, "bn"))
    ack = _all(pc.equal(kinds, 2), *common, *_nonneg(table, "ao"), bn_ok)
    batch_ack = _all(
        pc.equal(kinds, 3),
        *common,
        pc.equal(table["ao"], -1),
        bn_ok,
        _list_ok(table["aol"], increasing=False),
    )
    return pc.or_(pc.or_(ck, ack), batch_ack)


def _queue_offsets(table: Any, kinds: Any) -> Any:
    """CK: start + diffs; ACK: [ao]; bAck: aol -- as ``revivebatches.QUEUE_OFFSETS_TYPE``."""
    diffs = table["d"]
    starts = pc.take(table["so"], pc.list_parent_indices(diffs))
    ck_offsets = pa.ListArray.from_arrays(diffs.offsets, pc.add(pc.list_flatten(diffs), starts))
    single = pa.ListArray.from_arrays(
        pa.array(range(len(table) + 1), pa.int32()), pc.fill_null(table["ao"], 0)
    )
    batch = table["aol"]
    chosen = pc.case_when(
        pc.make_struct(pc.equal(kinds, 1), pc.equal(kinds, 2)), ck_offsets, single, batch
    )
    return chosen.cast(rb.QUEUE_OFFSETS_TYPE)


def _fast_table(
    read: MessageColumns, indexes: Sequence[int], *, tags: Sequence[str], table: Any, kinds: Any
) -> Any:
    is_ck = pc.equal(kinds, 1)
    null64 = pa.nulls(len(table), _I64)

    def ck_only(column: Any) -> Any:
        return pc.if_else(is_ck, column, null64)

    columns = {
        "queue_offset": pa.array([read.queue_offsets[i] for i in indexes], _I64),
        "store_timestamp_ms": pa.array([read.store_timestamps_ms[i] for i in indexes], _I64),
        # A bAck of one offset reads as an ACK (``AckRecord.is_batch``), as in ScanReviveLog.
        "kind": pc.if_else(
            _all(pc.equal(kinds, 3), pc.less_equal(pc.list_value_length(table["aol"]), 1)),
            pa.scalar(2, pa.int64()),
            kinds,
        ).cast(pa.int8()),
        "tag": pa.array(tags, pa.string()),
        "topic": table["t"],
        "group": table["c"],
        "queue_id": table["q"].cast(pa.int32()),
        "start_queue_offset": table["so"],
        "pop_time_ms": table["pt"],
        "invisible_ms": ck_only(table["it"]),
        "revive_time_ms": ck_only(pc.add(pc.fill_null(table["pt"], 0), table["it"])),
        "ack_bitmap": ck_only(table["bm"]),
        "queue_offsets": _queue_offsets(table, kinds),
        "broker_name": table["bn"],
        "reput_times": ck_only(table["rp"]).cast(pa.int32()),
        "deliver_time_ms": null64,
        "malformed_reason": pa.nulls(len(table), pa.string()),
    }
    return pa.Table.from_batches([pa.RecordBatch.from_pydict(columns, schema=rb.SCHEMA)])


def _null_key_in_body(table: Any, kinds: Any, bodies: Sequence[bytes]) -> set[int]:
    """Step 4: rows whose null ``v`` (or an ack's null ``bn``) is a key written as null."""
    suspects: set[int] = set()
    no_version = pc.indices_nonzero(pc.is_null(table["v"])).to_pylist()
    suspects.update(i for i in no_version if b'"v"' in bodies[i])
    acks = pc.and_(pc.not_equal(kinds, 1), pc.is_null(table["bn"]))
    suspects.update(i for i in pc.indices_nonzero(acks).to_pylist() if b'"bn"' in bodies[i])
    return suspects


def _candidates(read: MessageColumns) -> tuple[list[int], list[int], list[str], bytes]:
    """Step 1: indexes and kind codes of the bulk-path records, every record's tag, and
    the candidates' bodies joined by newlines (what :func:`_parse` reads).

    The shape checks (a known tag, 2..MAX_RECORD_BYTES bytes, ``{`` ... ``}``) run on
    all bodies at once over their newline-joined bytes.
    """
    tags = read.tags()
    bodies = read.bodies
    all_codes = [_JSON_TAGS.get(tag) for tag in tags]
    joined = b"\n".join(bodies)
    if not joined:
        return [], [], tags, b""
    lengths = np.fromiter(map(len, bodies), np.int64, len(bodies))
    ends = np.cumsum(lengths + 1) - 1  # each body's end in ``joined``
    starts = ends - lengths
    data = np.frombuffer(joined, np.uint8)
    last = len(data) - 1
    shaped = (
        (lengths >= 2)
        & (lengths <= records.MAX_RECORD_BYTES)
        & (data[np.minimum(starts, last)] == 0x7B)  # {
        & (data[np.clip(ends - 1, 0, last)] == 0x7D)  # }
        & np.fromiter((code is not None for code in all_codes), bool, len(bodies))
    )
    candidates = np.flatnonzero(shaped).tolist()
    codes: list[int] = [all_codes[i] for i in candidates]  # type: ignore[misc]
    if len(candidates) != len(bodies):
        joined = b"\n".join(bodies[i] for i in candidates)
    if joined.count(b"\n") != max(len(candidates) - 1, 0) or not _plain_text(joined):
        kept = [(i, c) for i, c in zip(candidates, codes, strict=True) if _plain(bodies[i])]
        candidates, codes = [i for i, _ in kept], [c for _, c in kept]
        joined = b"\n".join(bodies[i] for i in candidates)
    return candidates, codes, tags, joined


def _plain_text(data: bytes) -> bool:
    return b"\r" not in data and b"\\" not in data and _utf8(data)


def batch_of(read: MessageColumns, *, revive_queue_id: int) -> Any:
    """The records of ``read`` (one revive queue, in position order) as one batch."""
    candidates, kind_codes, tags, joined = _candidates(read)
    pieces = []
    slow = sorted(set(range(len(read.queue_offsets))) - set(candidates))
    if candidates:
        bodies = [read.bodies[i] for i in candidates]
        table = _parse(joined, len(bodies))
        if table is None:
            return batch_of_records(read, revive_queue_id=revive_queue_id)
        kinds = pa.array(kind_codes, pa.int64())
        mask = _checked(table, kinds)
        suspects = _null_key_in_body(table, kinds, bodies)
        if suspects:
            rows = pa.array(range(len(bodies)), pa.int64())
            mask = pc.and_(mask, pc.invert(pc.is_in(rows, pa.array(sorted(suspects)))))
        chosen = pc.indices_nonzero(mask).to_pylist()
        slow = sorted(set(slow) | (set(candidates) - {candidates[i] for i in chosen}))
        if chosen:
            fast = [candidates[i] for i in chosen]
            pieces.append(
                _fast_table(
                    read,
                    fast,
                    tags=[tags[i] for i in fast],
                    table=table.filter(mask),
                    kinds=pc.filter(kinds, mask),
                )
            )
    if slow:
        pieces.append(_slow_table(read, slow, revive_queue_id))
    if not pieces:
        return rb.empty()
    merged = pa.concat_tables(pieces)
    if len(pieces) > 1:
        merged = merged.sort_by("queue_offset")
    batches = merged.combine_chunks().to_batches()
    return batches[0] if batches else rb.empty()
