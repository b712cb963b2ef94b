"""Receipt handles: round trip, strict validation of untrusted input, fuzzing."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from popbroker.pop import errors, receipts
from popbroker.pop.receipts import ReceiptHandle, TopicType

NOW_MS = 1_722_325_700_000
UPSTREAM_EXAMPLE = "194 1722325671049 600000 0 0 broker-b 1 194 5228468"


def _handle(**overrides: object) -> ReceiptHandle:
    fields: dict[str, object] = {
        "start_queue_offset": 194,
        "pop_time_ms": 1_722_325_671_049,
        "invisible_ms": 600_000,
        "revive_queue_id": 0,
        "topic_type": TopicType.NORMAL,
        "broker_name": "broker-b",
        "queue_id": 1,
        "queue_offset": 194,
        "physical_offset": 5_228_468,
    }
    fields.update(overrides)
    return ReceiptHandle(**fields)  # type: ignore[arg-type]


def test_upstream_example_decodes_field_by_field() -> None:
    handle = receipts.decode(UPSTREAM_EXAMPLE, now_ms=NOW_MS, expected_broker="broker-b")
    assert handle == _handle()
    assert handle.next_visible_ms == 1_722_325_671_049 + 600_000
    assert receipts.next_visible_ms(handle) == handle.next_visible_ms
    assert not handle.is_fifo
    assert not handle.is_retry
    assert receipts.encode(handle) == UPSTREAM_EXAMPLE


def test_fifo_and_retry_markers() -> None:
    handle = receipts.decode(
        "5 1722325671049 30000 999 2 broker-b 0 7 99", now_ms=NOW_MS, revive_queue_num=8
    )
    assert handle.is_fifo
    assert handle.is_retry
    assert handle.topic_type is TopicType.RETRY_V2


handles = st.builds(
    ReceiptHandle,
    start_queue_offset=st.integers(0, 2**40),
    pop_time_ms=st.integers(0, NOW_MS),
    invisible_ms=st.integers(0, receipts.MAX_HANDLE_INVISIBLE_MS),
    revive_queue_id=st.sampled_from([0, 1, 7, receipts.FIFO_REVIVE_QUEUE_ID]),
    topic_type=st.sampled_from([TopicType.NORMAL, TopicType.RETRY_V2]),
    broker_name=st.from_regex(r"[A-Za-z0-9._-]{1,40}", fullmatch=True),
    queue_id=st.integers(0, 1024),
    queue_offset=st.integers(0, 2**40),
    physical_offset=st.integers(0, 2**62),
).filter(lambda h: h.queue_offset >= h.start_queue_offset)


@settings(max_examples=200, deadline=None)
@given(handles)
def test_encode_then_decode_is_identity(handle: ReceiptHandle) -> None:
    text = receipts.encode(handle)
    assert len(text) <= receipts.MAX_HANDLE_BYTES
    assert receipts.decode(text, now_ms=NOW_MS, revive_queue_num=8) == handle


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "fields"),
        ("194 1722325671049 600000 0 0 broker-b 1 194", "fields"),  # 8-field remoting form
        (UPSTREAM_EXAMPLE + " 1", "fields"),
        (UPSTREAM_EXAMPLE.replace(" ", "  ", 1), "fields"),
        (" " + UPSTREAM_EXAMPLE, "fields"),
        (UPSTREAM_EXAMPLE.replace(" ", "\t"), "fields"),
        ("0194 1722325671049 600000 0 0 broker-b 1 194 5228468", "canonical"),
        ("+194 1722325671049 600000 0 0 broker-b 1 194 5228468", "canonical"),
        ("-1 1722325671049 600000 0 0 broker-b 1 194 5228468", "canonical"),
        ("1_94 1722325671049 600000 0 0 broker-b 1 194 5228468", "canonical"),
        ("194 1722325671049 600000 0 0 broker-b 1 194 0x10", "canonical"),
        ("194 1722325671049 600000 0 0 broker-b 1 19\u0664 5228468", "non-ASCII"),
        ("99999999999999999999 1722325671049 600000 0 0 broker-b 1 194 1", "canonical"),
        ("9223372036854775808 1722325671049 600000 0 0 b 1 9223372036854775808 1", "2\\*\\*63"),
        ("194 1722325671049 600000 0 1 broker-b 1 194 5228468", "v1 retry"),
        ("194 1722325671049 600000 0 3 broker-b 1 194 5228468", "topicType"),
        ("194 1722325671049 600000 0 0 broker/b 1 194 5228468", "brokerName"),
        ("194 1722325671049 600000 0 0 broker-a 1 194 5228468", "belongs to broker"),
        ("195 1722325671049 600000 0 0 broker-b 1 194 5228468", "startOffset"),
        ("194 1722325671049 43200001 0 0 broker-b 1 194 5228468", "exceeds"),
        ("194 1722325671049 600000 8 0 broker-b 1 194 5228468", "reviveQid"),
        ("194 1722325671049 600000 1000 0 broker-b 1 194 5228468", "reviveQid"),
        ("194 1722325671049 600000 0 0 broker-b 2147483648 194 5228468", "queueId"),
        ("194 9722325671049 600000 0 0 broker-b 1 194 5228468", "future"),
        ("1" * 600, "longer than 512"),
    ],
)
def test_bad_handles_are_refused_with_a_reason(text: str, reason: str) -> None:
    with pytest.raises(errors.InvalidReceiptHandle, match=reason):
        receipts.decode(text, now_ms=NOW_MS, expected_broker="broker-b", revive_queue_num=8)


def test_queue_id_must_exist_when_the_queue_count_is_known() -> None:
    with pytest.raises(errors.InvalidReceiptHandle, match="queueId"):
        receipts.decode(UPSTREAM_EXAMPLE, now_ms=NOW_MS, queue_num=1)
    assert receipts.decode(UPSTREAM_EXAMPLE, now_ms=NOW_MS, queue_num=2).queue_id == 1


def test_old_pop_time_is_merely_expired_not_invalid() -> None:
    handle = receipts.decode("0 0 0 0 0 b 0 0 0", now_ms=NOW_MS)
    assert handle.next_visible_ms == 0


def test_every_error_is_not_retriable() -> None:
    assert errors.InvalidReceiptHandle.retriable is False
    assert errors.CapacityExceeded.retriable is True


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=700))
def test_fuzz_arbitrary_text_raises_only_invalid_receipt_handle(text: str) -> None:
    with contextlib.suppress(errors.InvalidReceiptHandle):
        receipts.decode(text, now_ms=NOW_MS, expected_broker="broker-b", revive_queue_num=8)


@settings(max_examples=300, deadline=None)
@given(
    handles,
    st.integers(0, 8),
    st.text(alphabet=st.sampled_from("0123456789 -+x\u0660é\x00"), max_size=25),
)
def test_fuzz_mutated_fields_raise_only_invalid_receipt_handle(
    handle: ReceiptHandle, field_index: int, replacement: str
) -> None:
    fields = receipts.encode(handle).split(" ")
    fields[field_index] = replacement
    try:
        decoded = receipts.decode(" ".join(fields), now_ms=NOW_MS, revive_queue_num=8)
    except errors.InvalidReceiptHandle:
        return
    assert receipts.encode(decoded) == " ".join(fields)  # accepted ⇒ canonical


def _field_by_field(text: str) -> tuple[list[int], str] | None:
    try:
        return receipts._parse_fields(text)
    except errors.InvalidReceiptHandle:
        return None


@settings(max_examples=400, deadline=None)
@given(
    handles,
    st.integers(0, 8),
    st.text(alphabet=st.sampled_from("0123456789 -_.+xAz\u0660é\x00"), max_size=25),
)
def test_the_one_pattern_accepts_exactly_what_the_field_by_field_parse_accepts(
    handle: ReceiptHandle, field_index: int, replacement: str
) -> None:
    """decode's fast path (one regular expression) and its slow path (the field-by-field
    parse, which names the bad field) agree on every handle, good or mutated."""
    fields = receipts.encode(handle).split(" ")
    fields[field_index] = replacement
    text = " ".join(fields)
    match = receipts._HANDLE.fullmatch(text)
    parsed = _field_by_field(text)
    assert (match is None) == (parsed is None)
    if match is not None and parsed is not None:
        groups = match.groups()
        assert parsed == ([int(g) for g in groups[:5] + groups[6:]], groups[5])


@given(st.text(max_size=80))
def test_the_one_pattern_agrees_on_arbitrary_text(text: str) -> None:
    assert (receipts._HANDLE.fullmatch(text) is None) == (_field_by_field(text) is None)
