"""``popbroker.grpc.frontappends.parse_item`` (WORK IN PROGRESS): the items popfront's
``append.go`` lays out, and malformed ones refused with ``MalformedItem``."""

from __future__ import annotations

import struct

import pytest

from popbroker.grpc.frontappends import FrontAppend, MalformedItem, parse_item
from popbroker.grpc.protocol import definition


def _s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">H", len(raw)) + raw


def _item(*, tag: str | None, group: str | None, record: bytes) -> bytes:
    none = struct.pack(">H", 0xFFFF)
    return b"".join(
        (
            b"A\x01",
            _s("orders"),
            _s("ID-1"),
            none if tag is None else _s(tag),
            none if group is None else _s(group),
            struct.pack(">IHI", 1024, 2, 30),
            record,
        )
    )


def test_an_a_item_gives_its_head_and_record() -> None:
    parsed = parse_item(_item(tag="标签", group=None, record=b"RECORD"))
    assert parsed == FrontAppend(1, "orders", "ID-1", "标签", None, 1024, 2, 30, b"RECORD")
    assert parse_item(_item(tag=None, group="", record=b"")).message_group == ""


def test_an_x_item_gives_the_message() -> None:
    message = definition.Message()
    message.topic.name = "orders"
    message.body = b"hello"
    parsed = parse_item(b"X" + message.SerializeToString())
    assert parsed == message


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
    ],
)
def test_a_malformed_item_is_refused(item: bytes) -> None:
    with pytest.raises(MalformedItem):
        parse_item(item)
