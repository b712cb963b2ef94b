"""What an append checks, wherever the record is encoded.

``LocalStore.append`` encodes the records itself. ``RemoteStore.append`` encodes them in
the calling role as *unplaced* records (``format.encode_unplaced``), and the store only
places them (``LocalStore.append_records``). Both paths run the same checks, in two
parts, so a refused message gets the same error type and text on either path:

1. :func:`checked_parts`, the checks that need no settings, in order: the topic name,
   a non-empty body, the properties (no separator bytes in them), the born host
   (at most 255 bytes), queue id and reconsume times (not negative, and within the
   record's 32 bits) and the born time (64 bits). On the wire
   path they run before the request leaves the caller.
2. :func:`check_sizes`, the store's limits on body and properties. On the wire path
   they run in the store.

A batch with one refused message is refused whole, as the store has always done.
"""

from __future__ import annotations

from popbroker.store import format as fmt
from popbroker.store import names
from popbroker.store.api import MessageToAppend
from popbroker.store.errors import EmptyBody, InvalidArgument, MessageTooLarge
from popbroker.store.settings import StoreSettings


def checked_parts(message: MessageToAppend) -> tuple[bytes, bytes, bytes]:
    """Part 1 of the module docstring; the encoded topic, born host and properties."""
    names.validate_topic_for_append(message.topic)
    check_body(message.topic, len(message.body))
    try:
        props = fmt.encode_properties(message.properties)
    except fmt.FormatError as exc:
        raise InvalidArgument(str(exc)) from exc
    host = message.born_host.encode("utf-8")
    if len(host) > 255:
        raise InvalidArgument("born_host longer than 255 bytes")
    if not (0 <= message.queue_id < 2**31 and 0 <= message.reconsume_times < 2**32):
        raise InvalidArgument("queue id and reconsume times must be >= 0 and fit the record")
    if not -(2**63) <= message.born_timestamp_ms < 2**63:
        raise InvalidArgument("born timestamp does not fit the record")
    return message.topic.encode("utf-8"), host, props


def check_body(topic: str, body_size: int) -> None:
    if not body_size:
        raise EmptyBody(f"message for topic {topic!r} has an empty body")


def check_sizes(settings: StoreSettings, *, body_size: int, properties_size: int) -> None:
    """Part 2 of the module docstring."""
    if body_size > settings.max_body_bytes:
        raise MessageTooLarge(
            f"body of {body_size} bytes exceeds the limit of {settings.max_body_bytes} bytes"
        )
    if properties_size > settings.max_properties_bytes:
        raise MessageTooLarge(
            f"properties of {properties_size} bytes exceed {settings.max_properties_bytes}"
        )


def encode_unplaced(message: MessageToAppend) -> bytes:
    """``message`` as an unplaced record, after part 1 of the checks."""
    topic, host, props = checked_parts(message)
    return fmt.encode_unplaced(
        queue_id=message.queue_id,
        flags=message.flags,
        born_timestamp_ms=message.born_timestamp_ms,
        reconsume_times=message.reconsume_times,
        topic=topic,
        born_host=host,
        properties=props,
        body=message.body,
    )


def checked_unplaced(raw: bytes, settings: StoreSettings) -> fmt.Unplaced:
    """An unplaced record from the wire, read and checked as its message would have been."""
    try:
        unplaced = fmt.parse_unplaced(raw)
    except fmt.FormatError as exc:
        raise InvalidArgument(f"not an unplaced record: {exc}") from exc
    names.validate_topic_for_append(unplaced.topic)
    check_body(unplaced.topic, unplaced.body_size)
    if unplaced.queue_id < 0:
        raise InvalidArgument("queue id and reconsume times must be >= 0 and fit the record")
    check_sizes(settings, body_size=unplaced.body_size, properties_size=unplaced.properties_size)
    return unplaced
