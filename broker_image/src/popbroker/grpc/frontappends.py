"""Append items from popfront (WORK IN PROGRESS, not wired): the messages of a
``SendMessage`` as popfront encoded them (``broker_image/front/append.go``).

An ``A`` item is a message popfront found plainly valid, already encoded as the unplaced
commit-log record popack would store (queue id 0), behind a head with what popack's
checks need; an ``X`` item is a serialized v2 ``Message`` for the reference path
(:func:`popbroker.grpc.convert.outgoing_message`). Layout, big-endian::

    'A'  u8 kind  u16 len + topic  u16 len + message id  u16 len + tag (0xFFFF: none)
         u16 len + message group (0xFFFF: none)  u32 body size
         u16 user properties  u32 their bytes  the unplaced record
    'X'  the serialized v2 Message

A malformed item raises :class:`MalformedItem`; popack answers it as a corrupted message
and never stores it.
"""

from __future__ import annotations

import struct
from typing import Any

from google.protobuf.message import DecodeError

from popbroker.grpc.protocol import definition
from popbroker.values import per_message

ITEM_APPEND = ord("A")
ITEM_REFERENCE = ord("X")
_NONE = 0xFFFF
_U16 = struct.Struct(">H")
_SIZES = struct.Struct(">IHI")  # body size, user properties, their bytes


class MalformedItem(ValueError):
    """An append item that does not parse."""


@per_message
class FrontAppend:
    """An ``A`` item: the head popack checks, and the record it stores."""

    kind: int  # the wire's MessageType
    topic: str
    message_id: str
    tag: str | None
    message_group: str | None
    body_size: int
    user_properties: int
    user_properties_bytes: int
    record: bytes


def parse_item(item: bytes) -> FrontAppend | Any:
    """A :class:`FrontAppend`, or the v2 ``Message`` of an ``X`` item."""
    if not item:
        raise MalformedItem("empty append item")
    if item[0] == ITEM_REFERENCE:
        message = definition.Message()
        try:
            message.ParseFromString(item[1:])
        except DecodeError as exc:
            raise MalformedItem(f"X item is not a v2 Message: {exc}") from exc
        return message
    if item[0] != ITEM_APPEND or len(item) < 2:
        raise MalformedItem(f"unknown append item {item[:1]!r}")
    kind = item[1]
    at = 2
    topic, at = _string(item, at)
    message_id, at = _string(item, at)
    tag, at = _optional(item, at)
    group, at = _optional(item, at)
    if len(item) < at + _SIZES.size:
        raise MalformedItem("append item cut short")
    body_size, user_properties, user_bytes = _SIZES.unpack_from(item, at)
    at += _SIZES.size
    return FrontAppend(
        kind, topic, message_id, tag, group, body_size, user_properties, user_bytes, item[at:]
    )


def _optional(item: bytes, at: int) -> tuple[str | None, int]:
    if len(item) < at + 2:
        raise MalformedItem("append item cut short")
    if _U16.unpack_from(item, at)[0] == _NONE:
        return None, at + 2
    return _string(item, at)


def _string(item: bytes, at: int) -> tuple[str, int]:
    if len(item) < at + 2:
        raise MalformedItem("append item cut short")
    (size,) = _U16.unpack_from(item, at)
    end = at + 2 + size
    if len(item) < end:
        raise MalformedItem("append item cut short")
    try:
        return item[at + 2 : end].decode("utf-8"), end
    except UnicodeDecodeError as exc:
        raise MalformedItem(f"append item has a string that is not UTF-8: {exc}") from exc
