"""revivecolumns.batch_of says for every revive-log body what the per-record decoder says.

The bulk path (Arrow's JSON reader, column-wise checks) must accept exactly the bodies
``revivelog.decode`` accepts, with the same values, and leave the rest to the per-record
path. Bodies are generated from valid records and then damaged: keys dropped or set to
null, wrong types, negative and huge integers, duplicate keys, escapes, unknown keys,
unsorted or over-long offset lists, spaces and newlines.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from popbroker.inspect import revivecolumns
from popbroker.store.api import PROPERTY_TAGS, MessageColumns, ReadStatus

KEYS = ("v", "so", "pt", "it", "bm", "n", "q", "t", "c", "d", "bn", "rp", "ao", "aol")
ODD_VALUES = st.sampled_from(
    [None, -1, 0, 1, 2**31, 2**63 - 1, 2**63, 1.0, True, "1", "", "x" * 1025, [], [1, 1], [3, 2],
     [None], list(range(33)), {"a": 1}, "\u00e9t\u00e9"]
)  # fmt: skip


def _valid(kind: str, offsets: list[int], bitmap: int) -> dict[str, object]:
    if kind == "ck":
        diffs = sorted(set(offsets))
        return {"v": 1, "so": 100, "pt": 1_700_000_000_000, "it": 60_000,
                "bm": bitmap % (1 << len(diffs)), "n": len(diffs), "q": 3, "t": "orders",
                "c": "billing", "d": diffs, "bn": "broker-a", "rp": 0}  # fmt: skip
    body: dict[str, object] = {"v": 1, "ao": offsets[0], "so": 100, "c": "billing",
                               "t": "orders", "q": 3, "pt": 1_700_000_000_000,
                               "bn": "broker-a"}  # fmt: skip
    if kind == "bAck":
        body["ao"] = -1
        body["aol"] = offsets
    return body


@st.composite
def bodies(draw: st.DrawFn) -> tuple[str, bytes]:
    kind = draw(st.sampled_from(["ck", "ack", "bAck"]))
    offsets = draw(st.lists(st.integers(0, 40), min_size=1, max_size=32))
    body = _valid(kind, offsets, draw(st.integers(0, 2**32)))
    for _ in range(draw(st.integers(0, 2))):
        key = draw(st.sampled_from(KEYS))
        if draw(st.booleans()):
            body.pop(key, None)
        else:
            body[key] = draw(ODD_VALUES)
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=draw(st.booleans()))
    damage = draw(st.sampled_from(["none", "none", "dup", "escape", "space", "newline", "extra"]))
    if damage == "dup" and len(body) > 0:
        key = draw(st.sampled_from(sorted(body)))
        text = text[:-1] + f',"{key}":{json.dumps(body[key])}}}'
    elif damage == "escape":
        text = text.replace('"bn"', '"\\u0062n"').replace('"v"', '"\\u0076"')
    elif damage == "space":
        text = " " + text.replace(":", ": ")
    elif damage == "newline":
        text = text.replace(",", ",\n", 1)
    elif damage == "extra":
        text = text + text
    return draw(st.sampled_from([kind, kind, kind, "ck", "bAck", "delay", "x"])), text.encode()


def _read(records: list[tuple[str, bytes]]) -> MessageColumns:
    """What ``LocalStore.read_columns`` returns for these (tag, body) records from offset 0."""
    return MessageColumns(
        status=ReadStatus.FOUND,
        queue_offsets=list(range(len(records))),
        store_timestamps_ms=[2 + i for i in range(len(records))],
        properties=[{PROPERTY_TAGS: tag} for tag, _ in records],
        bodies=[body for _, body in records],
        next_queue_offset=len(records),
        min_queue_offset=0,
        max_queue_offset=len(records),
    )


@pytest.mark.timeout(300)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(bodies(), min_size=1, max_size=24))
def test_bulk_decoding_equals_record_by_record(generated: list[tuple[str, bytes]]) -> None:
    read = _read(generated)
    bulk = revivecolumns.batch_of(read, revive_queue_id=0)
    one_by_one = revivecolumns.batch_of_records(read, revive_queue_id=0)
    assert bulk.to_pylist() == one_by_one.to_pylist()


@pytest.mark.timeout(60)
def test_plain_bodies_take_the_bulk_path() -> None:
    read = _read(
        [
            (tag, json.dumps(_valid(tag, [1, 4], 1), separators=(",", ":")).encode())
            for tag in ["ck", "ack", "bAck"] * 3
        ]
    )
    assert revivecolumns.bulk_decodable(read) == 9
    rows = revivecolumns.batch_of(read, revive_queue_id=0).to_pylist()
    assert [r["queue_offsets"] for r in rows[:3]] == [[101, 104], [1], [1, 4]]
    assert rows[0]["revive_time_ms"] == 1_700_000_060_000
