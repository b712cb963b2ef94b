"""Message values crossing the services boundary, and their store properties.

A message is stored as a store record whose ``properties`` hold both the
user's properties and a few system keys, named as RocketMQ names them so a
dump looks familiar:

  ==================  ===========================================================
  ``TAGS``            the tag (one; filters match it)
  ``KEYS``            the keys, joined with single spaces
  ``UNIQ_KEY``        the client's message id (kept on retry and DLQ copies)
  ``__SHARDINGKEY``   the FIFO message group
  ``TIMER_DELIVER_MS``  a DELAY message's delivery time (ms)
  ``ORIGIN_TOPIC``    on retry/DLQ copies: the topic the message was sent to
                      (set by the first hop only, :mod:`popbroker.pop.retrytopics`)
  ``1ST_POP_TIME``    on retry copies: when the message was first popped
  ==================  ===========================================================

User properties may not use these names (nor RocketMQ's other reserved ones we
list); :func:`to_store_properties` refuses them, so reading back never confuses
a user property with a system one.

Copies: :func:`copy_of` is a stored message appended again elsewhere (retry
and dead-letter copies keep body, born time/host and flags);
:func:`dead_letter_copy` appends the copy :func:`popbroker.pop.retrytopics.dead_letter`
describes.

Callers: sending (encode), popping/receiving and the gRPC edge (decode),
reviving, FIFO popping and forwarding to the DLQ (copies).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from popbroker.pop import retrytopics
from popbroker.store.api import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQUE_ID,
    MessageToAppend,
    StoredMessage,
)
from popbroker.values import per_message

PROPERTY_MESSAGE_GROUP = "__SHARDINGKEY"
PROPERTY_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_ORIGIN_TOPIC = retrytopics.PROPERTY_ORIGIN_TOPIC
PROPERTY_FIRST_POP_TIME = "1ST_POP_TIME"
KEY_SEPARATOR = " "

RESERVED_PROPERTY_KEYS = frozenset(
    {
        PROPERTY_TAGS,
        PROPERTY_KEYS,
        PROPERTY_UNIQUE_ID,
        PROPERTY_MESSAGE_GROUP,
        PROPERTY_DELIVER_MS,
        PROPERTY_ORIGIN_TOPIC,
        PROPERTY_FIRST_POP_TIME,
        "WAIT",
        "DELAY",
        "RETRY_TOPIC",
        "REAL_TOPIC",
        "REAL_QID",
        "TRAN_MSG",
        "PGROUP",
        "MIN_OFFSET",
        "MAX_OFFSET",
        "BUYER_ID",
        "ORIGIN_MESSAGE_ID",
        "TRANSFER_FLAG",
        "CORRECTION_FLAG",
        "MQ2_FLAG",
        "RECONSUME_TIME",
        "MSG_REGION",
        "TRACE_ON",
        "UNIQ_KEY",
        "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME",
        "POP_CK",
        "POP_CK_OFFSET",
        "TIMER_DELAY_SEC",
        "TIMER_DELAY_MS",
        "TIMER_OUT_MS",
        "TIMER_ENQUEUE_MS",
        "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES",
        "TIMER_DEL_UNIQKEY",
        "INNER_NUM",
        "INNER_BASE",
    }
)


class MessageKind(enum.Enum):
    """The v2 message type a producer declared (what the topic must accept)."""

    NORMAL = "NORMAL"
    FIFO = "FIFO"
    DELAY = "DELAY"
    TRANSACTION = "TRANSACTION"
    UNSUPPORTED = "UNSUPPORTED"  # LITE, PRIORITY, unspecified


@per_message
class OutgoingMessage:
    """One message as a producer sent it (already decoded from the wire)."""

    topic: str
    body: bytes
    message_id: str
    kind: MessageKind
    tag: str | None = None
    keys: tuple[str, ...] = ()
    message_group: str | None = None
    delivery_timestamp_ms: int | None = None
    user_properties: Mapping[str, str] | None = None
    born_timestamp_ms: int = 0
    born_host: str = ""


@per_message
class EncodedMessage:
    """A producer's message that the compiled front end already encoded as the store's
    unplaced record (queue id 0: the sender writes the queue it chooses), with the fields
    the sender checks and keys on. Only NORMAL and FIFO messages come this way; the
    front end checked what the fields do not show (keys, property names) by the same
    rules (``popbroker.grpc.frontappends``)."""

    topic: str
    message_id: str
    kind: MessageKind
    tag: str | None
    message_group: str | None
    body_size: int
    user_properties: int  # how many
    user_properties_bytes: int  # their keys' and values' UTF-8 bytes
    record: bytes


@per_message
class SendReceipt:
    """Where a sent message landed (the same receipt is returned for a repeated id)."""

    message_id: str
    topic: str
    queue_id: int
    queue_offset: int
    delayed: bool = False


@per_message
class DeliveredMessage:
    """One popped message, ready to be written to a client."""

    topic: str  # the topic the client subscribed to (never a retry topic)
    stored: StoredMessage
    receipt_handle: str
    delivery_attempt: int  # 1 on the first delivery
    invisible_ms: int


def to_store_properties(message: OutgoingMessage) -> dict[str, str]:
    """User properties plus the system keys of ``message`` (see the module table)."""
    properties = dict(message.user_properties or {})
    properties[PROPERTY_UNIQUE_ID] = message.message_id
    if message.tag:
        properties[PROPERTY_TAGS] = message.tag
    if message.keys:
        properties[PROPERTY_KEYS] = KEY_SEPARATOR.join(message.keys)
    if message.message_group:
        properties[PROPERTY_MESSAGE_GROUP] = message.message_group
    if message.delivery_timestamp_ms is not None:
        properties[PROPERTY_DELIVER_MS] = str(message.delivery_timestamp_ms)
    return properties


def user_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """The user's properties among stored ``properties``."""
    return {k: v for k, v in properties.items() if k not in RESERVED_PROPERTY_KEYS}


def message_id(stored: StoredMessage) -> str:
    """The client's message id, or a stand-in built from the commit-log position."""
    return stored.properties.get(PROPERTY_UNIQUE_ID) or f"{stored.physical_offset:032X}"


def keys(properties: Mapping[str, str]) -> tuple[str, ...]:
    """The message keys."""
    joined = properties.get(PROPERTY_KEYS, "")
    return tuple(k for k in joined.split(KEY_SEPARATOR) if k)


def message_group(properties: Mapping[str, str]) -> str | None:
    """The FIFO message group, if any."""
    return properties.get(PROPERTY_MESSAGE_GROUP) or None


def delivery_timestamp_ms(properties: Mapping[str, str]) -> int | None:
    """A DELAY message's delivery time, if any."""
    raw = properties.get(PROPERTY_DELIVER_MS)
    if raw is None or not (raw.isascii() and raw.isdigit()):
        return None
    return int(raw)


def kind_of(properties: Mapping[str, str]) -> MessageKind:
    """The message's kind as stored: FIFO with a group, DELAY with a delivery time."""
    if message_group(properties) is not None:
        return MessageKind.FIFO
    if delivery_timestamp_ms(properties) is not None:
        return MessageKind.DELAY
    return MessageKind.NORMAL


def copy_of(
    stored: StoredMessage,
    *,
    topic: str,
    queue_id: int,
    properties: Mapping[str, str],
    reconsume_times: int,
) -> MessageToAppend:
    """``stored`` appended again to ``topic``/``queue_id`` with new properties and count."""
    return MessageToAppend(
        topic=topic,
        queue_id=queue_id,
        body=stored.body,
        properties=properties,
        born_timestamp_ms=stored.born_timestamp_ms,
        born_host=stored.born_host,
        reconsume_times=reconsume_times,
        flags=stored.flags,
    )


def dead_letter_copy(stored: StoredMessage, letter: retrytopics.DeadLetter) -> MessageToAppend:
    """The append of ``stored`` as the dead letter ``letter`` describes."""
    return copy_of(
        stored,
        topic=letter.topic,
        queue_id=letter.queue_id,
        properties=letter.properties,
        reconsume_times=letter.reconsume_times,
    )
