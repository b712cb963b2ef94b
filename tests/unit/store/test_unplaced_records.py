"""Unplaced records (``format.encode_unplaced``/``parse_unplaced``/``place_unplaced``) and
the append checks both sides of the store wire share (``store.appending``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from popbroker.store import api, appending, errors
from popbroker.store import format as fmt
from popbroker.store.settings import StoreSettings

NAME = st.from_regex(r"[A-Za-z0-9_-]{1,40}", fullmatch=True)
TEXT = st.text(st.characters(exclude_characters="\x01\x02", exclude_categories=["Cs"]), max_size=12)
INT64 = st.integers(-(2**63), 2**63 - 1)


@given(
    topic=NAME,
    queue_id=st.integers(0, 2**31 - 1),
    body=st.binary(min_size=1, max_size=64),
    properties=st.dictionaries(TEXT, TEXT, max_size=4),
    born=INT64,
    host=TEXT,
    reconsume=st.integers(0, 2**32 - 1),
    flags=st.integers(0, 2**16 - 1),
    physical=st.integers(0, 2**62),
    queue_offset=st.integers(0, 2**62),
    stored=st.integers(1, 2**62),
)
def test_a_placed_record_is_the_record_the_store_encodes_itself(
    topic: str,
    queue_id: int,
    body: bytes,
    properties: dict[str, str],
    born: int,
    host: str,
    reconsume: int,
    flags: int,
    physical: int,
    queue_offset: int,
    stored: int,
) -> None:
    message = api.MessageToAppend(topic, queue_id, body, properties, born, host, reconsume, flags)
    raw = appending.encode_unplaced(message)
    unplaced = fmt.parse_unplaced(raw)
    assert (unplaced.topic, unplaced.queue_id, unplaced.reconsume_times) == (
        topic,
        queue_id,
        reconsume,
    )
    assert unplaced.properties == properties
    assert unplaced.body_size == len(body)
    assert fmt.unplaced_topic(raw) == topic
    placed = fmt.place_unplaced(
        raw, physical_offset=physical, queue_offset=queue_offset, store_timestamp_ms=stored
    )
    reference = fmt.encode_record(
        physical_offset=physical,
        queue_id=queue_id,
        queue_offset=queue_offset,
        flags=flags,
        born_timestamp_ms=born or stored,  # a zero born time becomes the store time
        store_timestamp_ms=stored,
        reconsume_times=reconsume,
        topic=topic.encode(),
        born_host=host.encode(),
        properties=fmt.encode_properties(properties),
        body=body,
    )
    assert bytes(placed) == reference
    assert fmt.decode_record(bytes(placed), expected_physical_offset=physical).body == body


@given(cut=st.integers(0, 90), flip=st.integers(0, 90))
def test_a_damaged_unplaced_record_is_refused_not_misread(cut: int, flip: int) -> None:
    message = api.MessageToAppend("orders", 1, b"body", {api.PROPERTY_TAGS: "A"}, 0, "h")
    raw = appending.encode_unplaced(message)
    with pytest.raises(fmt.FormatError):
        fmt.parse_unplaced(raw[: min(cut, len(raw) - 1)])
    damaged = bytearray(raw)
    at = min(flip, len(raw) - 1)
    damaged[at] ^= 0xFF
    try:
        unplaced = fmt.parse_unplaced(bytes(damaged))
    except fmt.FormatError:
        return
    # a flip that keeps the structure whole changes only a value, never the extent
    assert unplaced.body_size + unplaced.properties_size <= len(raw)


@pytest.mark.parametrize(
    ("message", "error", "text"),
    [
        (api.MessageToAppend("no spaces", 0, b"x"), errors.InvalidName, "must match"),
        (api.MessageToAppend("t", 0, b""), errors.EmptyBody, "empty body"),
        (api.MessageToAppend("t", 0, b"x", {"k\x01": "v"}), errors.InvalidArgument, "separator"),
        (api.MessageToAppend("t", 0, b"x", born_host="h" * 256), errors.InvalidArgument, "255"),
        (api.MessageToAppend("t", -1, b"x"), errors.InvalidArgument, ">= 0"),
        (api.MessageToAppend("t", 2**31, b"x"), errors.InvalidArgument, "fit the record"),
        (api.MessageToAppend("t", 0, b"x", reconsume_times=-1), errors.InvalidArgument, ">= 0"),
    ],
)
def test_the_caller_side_checks_raise_the_stores_errors(
    message: api.MessageToAppend, error: type[errors.StoreError], text: str
) -> None:
    with pytest.raises(error, match=text):
        appending.encode_unplaced(message)


def test_the_store_side_checks_apply_its_limits_to_records() -> None:
    settings = StoreSettings(max_body_bytes=8, max_properties_bytes=16)
    fits = appending.encode_unplaced(api.MessageToAppend("t", 0, b"12345678"))
    assert appending.checked_unplaced(fits, settings).body_size == 8
    too_big = appending.encode_unplaced(api.MessageToAppend("t", 0, b"123456789"))
    with pytest.raises(errors.MessageTooLarge, match="body of 9 bytes"):
        appending.checked_unplaced(too_big, settings)
    many = appending.encode_unplaced(api.MessageToAppend("t", 0, b"x", {"key": "v" * 20}))
    with pytest.raises(errors.MessageTooLarge, match="properties of 25 bytes"):
        appending.checked_unplaced(many, settings)
    with pytest.raises(errors.InvalidArgument, match="not an unplaced record"):
        appending.checked_unplaced(b"garbage", settings)
