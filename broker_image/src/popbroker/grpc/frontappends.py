"""Sends encoded in the front: the messages of a ``SendMessage`` as popfront encoded them.

Converting a v2 ``Message`` into the store's record -- ``convert.outgoing_message``, then
``messages.to_store_properties``, then the record's encoding -- was the largest piece of
per-message work left in popack's produce path. popfront (``broker_image/front/append.go``)
does it in Go and sends ``FRONT_SEND`` instead of the client's ``SendMessage``, framed
only (``popbroker.grpc.frontframes``). The request is the client's messages as items, each
u32 length + item, big-endian, in the client's order. An item's first byte says what it is:

``A``, a message popfront found plainly valid, already the unplaced record popack would
store (queue id 0), behind a head with what the sender's checks read::

    'A'  u8 kind  u16 len + topic  u16 len + message id  u16 len + tag (0xFFFF: none)
         u16 len + message group (0xFFFF: none)  u32 body size
         u16 user properties  u32 their bytes  the unplaced record

``X``, a serialized v2 ``Message`` for the reference path (anything popfront is not sure
of: DELAY and other kinds, unusual keys or properties, many properties). popfront never
refuses a message, so every error code and text stays the reference's.

An ``A`` item becomes an :class:`~popbroker.services.messages.EncodedMessage`; the sender
checks its head as it checks a decoded message (topic, kind, body, id, tag, group, the
property count and bytes). What the head does not show -- keys, property names -- popfront
checked by the same rules; the Go tests compare its records with the Python reference's
(``tests/unit/services/front_appends.py``), and the store checks every record's structure.
popack checks that the head names the record's topic. A malformed item is answered
``MESSAGE_CORRUPTED`` in its own entry and never stored; a request whose items do not
parse is refused ``INVALID_ARGUMENT``.

:class:`~popbroker.grpc.front.FrontBatching` serves ``FRONT_SEND`` as the v2 ``SendMessage``
handler with :class:`FrontSend` as its request, so call counting and the auth guard see a
``SendMessage`` (:attr:`FrontSend.messages` names the topics as the guard reads them).
The decision and its figures: ``docs/design/2026-11-28-sends-encoded-in-the-front.md``.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from google.protobuf.message import DecodeError

from popbroker.grpc import convert
from popbroker.grpc.protocol import definition
from popbroker.services import errors
from popbroker.services.messages import EncodedMessage, OutgoingMessage
from popbroker.store import format as fmt

FRONT_SEND = "/popfleet.front.v1.Front/SendMessage"
ITEM_APPEND = ord("A")
ITEM_REFERENCE = ord("X")
_NONE = 0xFFFF
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_SIZES = struct.Struct(">IHI")  # body size, user properties, their bytes


class MalformedItem(errors.MessageCorrupted):
    """An item that does not parse: its message is answered ``MESSAGE_CORRUPTED``."""


class MalformedRequest(ValueError):
    """A ``FRONT_SEND`` request whose items do not parse."""


Converted = EncodedMessage | OutgoingMessage | Exception


def parse_item(item: bytes) -> EncodedMessage | Any:
    """An :class:`EncodedMessage`, or the v2 ``Message`` of an ``X`` item."""
    if not item:
        raise MalformedItem("empty append item")
    if item[0] == ITEM_REFERENCE:
        message = definition.Message()
        try:
            message.ParseFromString(item[1:])
        except DecodeError as exc:
            raise MalformedItem(f"X item is not a v2 Message: {exc}") from exc
        return message
    if item[0] != ITEM_APPEND:
        raise MalformedItem(f"unknown append item {item[:1]!r}")
    # One pass, no helpers (this runs per message). Positions only grow by the sizes
    # the item declares, so once the last field fits, every earlier one did.
    try:
        kind = item[1]
        (size,) = _U16.unpack_from(item, 2)
        at = 4 + size
        topic_raw = item[4:at]
        (size,) = _U16.unpack_from(item, at)
        message_id = item[at + 2 : at + 2 + size].decode()
        at += 2 + size
        (size,) = _U16.unpack_from(item, at)
        tag = None if size == _NONE else item[at + 2 : at + 2 + size].decode()
        at += 2 if size == _NONE else 2 + size
        (size,) = _U16.unpack_from(item, at)
        group = None if size == _NONE else item[at + 2 : at + 2 + size].decode()
        at += 2 if size == _NONE else 2 + size
        body_size, user_properties, user_bytes = _SIZES.unpack_from(item, at)
        at += _SIZES.size
        topic = topic_raw.decode()
    except (IndexError, struct.error) as exc:
        raise MalformedItem("append item cut short") from exc
    except UnicodeDecodeError as exc:
        raise MalformedItem(f"append item has a string that is not UTF-8: {exc}") from exc
    record = item[at:]
    named = fmt.FIXED_END + 1
    if len(record) <= named or record[named : named + record[fmt.FIXED_END]] != topic_raw:
        raise MalformedItem(f"append item names topic {topic!r}, its record another")
    return EncodedMessage(
        topic,
        message_id,
        convert.message_kind(kind),
        tag,
        group,
        body_size,
        user_properties,
        user_bytes,
        record,
    )


class _Resource(NamedTuple):
    name: str


class _Addressed(NamedTuple):
    """A message as the auth guard reads a ``SendMessageRequest``'s: its topic's name."""

    topic: _Resource


class FrontSend:
    """A ``FRONT_SEND`` request: per message, what the sender takes or why it cannot."""

    __slots__ = ("converted", "message_ids", "topics")

    def __init__(self, converted: list[Converted], message_ids: list[str], topics: set[str]):
        self.converted = converted
        self.message_ids = message_ids  # what each entry of the answer names
        self.topics = topics  # of the items that parse

    @property
    def messages(self) -> tuple[_Addressed, ...]:
        return tuple(_Addressed(_Resource(topic)) for topic in sorted(self.topics))

    @classmethod
    def parse(cls, raw: bytes) -> FrontSend:
        converted: list[Converted] = []
        message_ids: list[str] = []
        topics: set[str] = set()
        at, end = 0, len(raw)
        while at < end:
            if end - at < _U32.size:
                raise MalformedRequest("FRONT_SEND item length cut short")
            (size,) = _U32.unpack_from(raw, at)
            at += _U32.size
            if end - at < size:
                raise MalformedRequest("FRONT_SEND item cut short")
            item = raw[at : at + size]
            at += size
            try:
                parsed = parse_item(item)
            except MalformedItem as exc:
                converted.append(exc)
                message_ids.append("")
                continue
            if isinstance(parsed, EncodedMessage):
                converted.append(parsed)
                message_ids.append(parsed.message_id)
                topics.add(parsed.topic)
                continue
            message_ids.append(parsed.system_properties.message_id)
            topics.add(parsed.topic.name)
            converted.append(convert.outgoing_or_error(parsed))
        return cls(converted, message_ids, topics)
