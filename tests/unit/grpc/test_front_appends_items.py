"""``popbroker.grpc.frontappends``: the items popfront's ``append.go`` lays out, a
``FRONT_SEND`` request of them, and malformed ones refused (per item, or the request)."""

from __future__ import annotations

import struct

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from popbroker.grpc import frontframes
from popbroker.grpc.frontappends import FrontSend, MalformedItem, MalformedRequest, parse_item
from popbroker.grpc.protocol import definition
from popbroker.services.messages import EncodedMessage, MessageKind, OutgoingMessage
from popbroker.store.api import MessageToAppend
from popbroker.store.appending import encode_unplaced


def _s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">H", len(raw)) + raw


def _record(topic: str = "orders") -> bytes:
    return encode_unplaced(MessageToAppend(topic=topic, queue_id=0, body=b"hello"))


def _item(
    *, tag: str | None = None, group: str | None = None, topic: str = "orders", record: bytes
) -> bytes:
    none = struct.pack(">H", 0xFFFF)
    return b"".join(
        (
            b"A\x02",  # FIFO on the wire
            _s(topic),
            _s("ID-1"),
            none if tag is None else _s(tag),
            none if group is None else _s(group),
            struct.pack(">IHI", 5, 2, 30),
            record,
        )
    )


def _request(*items: bytes) -> bytes:
    return b"".join(struct.pack(">I", len(item)) + item for item in items)


def _x(topic: str, message_id: str) -> bytes:
    message = definition.Message()
    message.topic.name = topic
    message.body = b"hello"
    message.system_properties.message_id = message_id
    message.system_properties.message_type = definition.NORMAL
    return b"X" + bytes(message.SerializeToString())


def test_an_a_item_gives_its_head_and_record() -> None:
    record = _record()
    parsed = parse_item(_item(tag="标签", record=record))
    assert parsed == EncodedMessage(
        "orders", "ID-1", MessageKind.FIFO, "标签", None, 5, 2, 30, record
    )
    assert parse_item(_item(group="", record=record)).message_group == ""


def test_an_x_item_gives_the_message() -> None:
    parsed = parse_item(_x("orders", "M"))
    assert not isinstance(parsed, EncodedMessage)
    assert parsed.topic.name == "orders"
    assert parsed.system_properties.message_id == "M"


@pytest.mark.parametrize(
    "item",
    [
        b"",
        b"Z",
        b"A",
        _item(tag="t", group="g", record=b"")[:-3],  # cut in the sizes
        b"A\x01" + struct.pack(">H", 9) + b"or",  # a string cut short
        b"A\x01" + struct.pack(">H", 2) + b"\xff\xfe",  # not UTF-8
        b"X\xff\xff\xff",  # not a Message
        _item(record=b""),  # no record
        _item(topic="orders", record=_record("payments")),  # the head names another topic
    ],
)
def test_a_malformed_item_is_refused(item: bytes) -> None:
    with pytest.raises(MalformedItem):
        parse_item(item)


def test_a_request_answers_per_item_and_names_its_topics_as_the_auth_guard_reads_them() -> None:
    record = _record()
    send = FrontSend.parse(
        _request(_item(record=record), b"Zbad", _x("orders", "M2"), _x("", "M3"))
    )
    encoded, malformed, decoded, refused = send.converted
    assert isinstance(encoded, EncodedMessage) and encoded.record == record
    assert isinstance(malformed, MalformedItem)
    assert isinstance(decoded, OutgoingMessage) and decoded.message_id == "M2"
    assert isinstance(refused, OutgoingMessage) and refused.topic == ""  # the sender refuses it
    assert send.message_ids == ["ID-1", "", "M2", "M3"]
    assert send.topics == {"orders", ""}
    assert sorted(m.topic.name for m in send.messages) == ["", "orders"]
    assert FrontSend.parse(b"").converted == []


@pytest.mark.parametrize("raw", [b"\x00\x00\x01", struct.pack(">I", 9) + b"short"])
def test_a_request_cut_short_is_refused_as_invalid_argument(raw: bytes) -> None:
    with pytest.raises(MalformedRequest):
        FrontSend.parse(raw)
    code, _ = frontframes.failure("FRONT_SEND", MalformedRequest("cut"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT.value[0]


@given(raw=st.binary(max_size=300))
def test_any_bytes_parse_or_are_refused_cleanly(raw: bytes) -> None:
    """popfront is ours, but what it sends is parsed as untrusted input: any bytes give a
    request (each item a message or its own error) or ``MalformedRequest``, nothing else."""
    try:
        send = FrontSend.parse(raw)
    except MalformedRequest:
        return
    assert len(send.converted) == len(send.message_ids)
    for item in send.converted:
        assert isinstance(item, EncodedMessage | OutgoingMessage | Exception)


@given(
    head=st.binary(max_size=60),
    cut=st.integers(min_value=0, max_value=200),
)
def test_any_a_item_cut_anywhere_parses_or_is_malformed(head: bytes, cut: int) -> None:
    item = (b"A" + head + _item(record=_record()))[:cut]
    try:
        parsed = parse_item(item)
    except MalformedItem:
        return
    assert isinstance(parsed, EncodedMessage)
    assert parsed.record[51 + 1 : 51 + 1 + parsed.record[51]] == parsed.topic.encode()
