"""The commit-log record and consume-queue entry layouts (popbroker.store.format)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popbroker.store import format as fmt


def _record(
    physical: int = 0, body: bytes = b"hello", props: dict[str, str] | None = None
) -> bytes:
    return fmt.encode_record(
        physical_offset=physical,
        queue_id=3,
        queue_offset=42,
        flags=7,
        born_timestamp_ms=1_700_000_000_000,
        store_timestamp_ms=1_700_000_000_123,
        reconsume_times=2,
        topic=b"orders",
        born_host=b"127.0.0.1:5000",
        properties=fmt.encode_properties(props or {"TAGS": "A", "KEYS": "k1"}),
        body=body,
    )


def test_record_round_trips_every_field() -> None:
    raw = _record(physical=4096)
    record = fmt.decode_record(raw, expected_physical_offset=4096)
    assert (record.topic, record.queue_id, record.queue_offset) == ("orders", 3, 42)
    assert record.flags == 7
    assert record.reconsume_times == 2
    assert record.born_host == "127.0.0.1:5000"
    assert record.properties == {"TAGS": "A", "KEYS": "k1"}
    assert record.body == b"hello"
    assert record.total_size == len(raw)
    assert record.store_timestamp_ms - record.born_timestamp_ms == 123


@settings(max_examples=200, deadline=None)
@given(position=st.integers(min_value=0, max_value=2000), value=st.integers(1, 255))
def test_any_flipped_byte_is_detected(position: int, value: int) -> None:
    raw = bytearray(_record(body=b"x" * 1500))
    position %= len(raw)
    raw[position] ^= value
    with pytest.raises(fmt.FormatError):
        fmt.decode_record(bytes(raw), expected_physical_offset=0)


def test_record_read_at_the_wrong_position_is_rejected() -> None:
    with pytest.raises(fmt.FormatError, match="physical offset"):
        fmt.decode_record(_record(physical=100), expected_physical_offset=200)


def test_truncated_record_is_rejected() -> None:
    raw = _record()
    for cut in (0, 5, fmt.PREFIX_SIZE, len(raw) - 1):
        with pytest.raises(fmt.FormatError):
            fmt.decode_record(raw[:cut], expected_physical_offset=0)


def test_probe_classifies_record_filler_end_and_garbage() -> None:
    raw = _record()
    assert fmt.probe(raw[:9], position_in_segment=0, segment_bytes=4096).kind == "record"
    filler = fmt.encode_filler(100)
    assert fmt.probe(filler, position_in_segment=3996, segment_bytes=4096).kind == "filler"
    assert fmt.probe(bytes(9), position_in_segment=0, segment_bytes=4096).kind == "end"
    assert fmt.probe(b"", position_in_segment=4093, segment_bytes=4096).kind == "end"
    assert (
        fmt.probe(b"\x00\x00\x00\x40\x77abcd", position_in_segment=0, segment_bytes=4096).kind
        == "bad"
    )
    too_long = (5000).to_bytes(4, "big") + bytes([fmt.MAGIC_MESSAGE_V1]) + bytes(4)
    assert fmt.probe(too_long, position_in_segment=0, segment_bytes=4096).kind == "bad"


def test_filler_with_wrong_length_is_bad() -> None:
    assert fmt.probe(fmt.encode_filler(50), position_in_segment=0, segment_bytes=4096).kind == "bad"


def test_properties_refuse_separator_bytes() -> None:
    with pytest.raises(fmt.FormatError):
        fmt.encode_properties({"a\x01": "b"})
    with pytest.raises(fmt.FormatError):
        fmt.encode_properties({"a": "b\x02"})


_PROPERTY_TEXT = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x01\x02")
)


@given(st.dictionaries(_PROPERTY_TEXT.filter(bool), _PROPERTY_TEXT))
@settings(max_examples=100, deadline=None)
def test_properties_round_trip(props: dict[str, str]) -> None:
    assert fmt.decode_properties(fmt.encode_properties(props)) == props


def test_consume_queue_entry_is_twenty_bytes_and_round_trips() -> None:
    raw = fmt.encode_cq_entry(123456789, 1070, -42)
    assert len(raw) == fmt.CQ_ENTRY_SIZE == 20
    assert fmt.decode_cq_entry(raw) == (123456789, 1070, -42)
