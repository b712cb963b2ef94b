"""Receipt handles: the proxy's space-separated POP handle, encoded and strictly decoded.

Purpose: a receipt handle is everything a client must send back to ack or to
change the invisible time of one popped message. We keep RocketMQ's proxy
format byte for byte so handles look like RocketMQ's (fact sheet §4.1), one
line of nine fields: ``startOffset popTime invisibleTime reviveQid topicType
brokerName queueId queueOffset commitLogOffset``, e.g.::

    194 1722325671049 600000 0 0 broker-b 1 194 5228468

Fields (index: our name — meaning):

  0. ``start_queue_offset`` — start queue offset of the checkpoint (CK) that
     covers the message; part of the CK match key.
  1. ``pop_time_ms`` — the pop request's time; part of the CK match key.
  2. ``invisible_ms`` — invisibility duration of the batch.
  3. ``revive_queue_id`` — revive queue holding the CK; ``999`` marks a FIFO
     handle (FIFO pops write no CK).
  4. ``topic_type`` — ``0`` normal topic, ``2`` v2 retry topic. ``1`` (v1
     retry, ``%RETRY%g_t``) is never produced by this broker and is refused.
  5. ``broker_name`` — the broker that popped the message.
  6. ``queue_id`` — queue of the topic actually read (the retry topic's queue
     for a retried message).
  7. ``queue_offset`` — this message's own queue offset.
  8. ``physical_offset`` — the message's commit-log position (RocketMQ's
     ``commitLogOffset``, proxy only), used to forward it to a DLQ.

Decisions (validation of untrusted input, in this order):

  1. Length: at most ``MAX_HANDLE_BYTES`` (512) characters, ASCII only.
  2. Exactly 9 fields separated by single spaces. We do **not** accept the
     8-field remoting form: this broker issues every handle itself, always
     with 9 fields, so an 8-field handle cannot be ours.
  3. Every integer field is canonical decimal: ``0`` or ``[1-9][0-9]*``, at
     most 19 digits, no sign, no leading zeros, no Unicode digits.
  4. Ranges: offsets ``0 <= x < 2**63``; ``queue_offset >= start_queue_offset``;
     ``0 <= queue_id < 2**31`` and, when the caller passes ``queue_num`` (the
     real topic's queue count), below it; ``revive_queue_id`` is 999 or, when the caller
     passes ``revive_queue_num``, below it (else below 999);
     ``0 <= invisible_ms <= MAX_HANDLE_INVISIBLE_MS`` (12 h, the proxy's
     maximum invisible time); ``pop_time_ms <= now_ms + MAX_CLOCK_SKEW_MS``
     (60 s: a handle from the future was not made by our clock). An old pop
     time is *not* an error: such a handle is merely expired, and acking it
     is harmless.
  5. ``broker_name`` matches ``[A-Za-z0-9._-]{1,127}`` and, when the caller
     passes ``expected_broker``, equals it (a handle for another broker is
     refused rather than written into our revive log as a useless record).
  6. ``topic_type`` is ``0`` or ``2``; a FIFO handle has type ``0`` or ``2``
     too (FIFO retry never happens, but we do not special-case it).

Every violation raises :class:`~popbroker.pop.errors.InvalidReceiptHandle`
with the reason; nothing else escapes :func:`decode` (fuzz-tested).

Callers: the services layer encodes a handle per popped message and decodes
the handle of every Ack/ChangeInvisibleDuration/ForwardMessageToDeadLetterQueue
request; :mod:`popbroker.pop.invisibility` builds the handle returned by a
change of invisible time.
"""

from __future__ import annotations

import enum
import re

from popbroker.pop import errors
from popbroker.values import per_message

FIFO_REVIVE_QUEUE_ID = 999
MAX_HANDLE_BYTES = 512
MAX_HANDLE_INVISIBLE_MS = 12 * 3600 * 1000
MAX_CLOCK_SKEW_MS = 60_000
MAX_QUEUE_OFFSET = 2**63 - 1
MAX_QUEUE_ID = 2**31 - 1
FIELD_COUNT = 9

_INT_PATTERN = r"0|[1-9][0-9]{0,18}"
_NAME_PATTERN = r"[A-Za-z0-9._-]{1,127}"
_CANONICAL_INT = re.compile(_INT_PATTERN, re.ASCII)
_BROKER_NAME = re.compile(_NAME_PATTERN, re.ASCII)
# Rules 1-3 for the whole handle at once (the fast path of :func:`decode`): it matches
# exactly the handles the field-by-field parse accepts, which names the first bad field.
_HANDLE = re.compile(
    " ".join([f"({_INT_PATTERN})"] * 5 + [f"({_NAME_PATTERN})"] + [f"({_INT_PATTERN})"] * 3),
    re.ASCII,
)
_INT_FIELDS = (
    "startOffset",
    "popTime",
    "invisibleTime",
    "reviveQid",
    "topicType",
    "queueId",
    "queueOffset",
    "commitLogOffset",
)


class TopicType(enum.IntEnum):
    """Which kind of topic the message was read from (handle field 4)."""

    NORMAL = 0
    RETRY_V1 = 1
    RETRY_V2 = 2


@per_message
class ReceiptHandle:
    """A decoded, validated receipt handle (see the module docstring for fields)."""

    start_queue_offset: int
    pop_time_ms: int
    invisible_ms: int
    revive_queue_id: int
    topic_type: TopicType
    broker_name: str
    queue_id: int
    queue_offset: int
    physical_offset: int

    @property
    def is_fifo(self) -> bool:
        """True for a FIFO (ordered) handle: revive queue 999, no checkpoint."""
        return self.revive_queue_id == FIFO_REVIVE_QUEUE_ID

    @property
    def is_retry(self) -> bool:
        """True when the message was read from the group's retry topic."""
        return self.topic_type != TopicType.NORMAL

    @property
    def next_visible_ms(self) -> int:
        """When the message becomes visible again unless acked: pop time + invisible time."""
        return self.pop_time_ms + self.invisible_ms


def next_visible_ms(handle: ReceiptHandle) -> int:
    """Return ``pop_time_ms + invisible_ms`` of ``handle``."""
    return handle.next_visible_ms


def encode(handle: ReceiptHandle) -> str:
    """Format ``handle`` in the proxy's 9-field space-separated form."""
    h = handle
    return (
        f"{h.start_queue_offset} {h.pop_time_ms} {h.invisible_ms} {h.revive_queue_id} "
        f"{h.topic_type.value} {h.broker_name} {h.queue_id} {h.queue_offset} {h.physical_offset}"
    )


def decode(
    text: str,
    *,
    now_ms: int,
    expected_broker: str | None = None,
    revive_queue_num: int | None = None,
    queue_num: int | None = None,
) -> ReceiptHandle:
    """Parse and validate an untrusted receipt handle.

    Raises :class:`InvalidReceiptHandle` (and nothing else) when ``text`` is not
    a handle this broker could have issued; see the module docstring for the
    exact rules.
    """
    if len(text) > MAX_HANDLE_BYTES:
        raise errors.InvalidReceiptHandle(f"receipt handle longer than {MAX_HANDLE_BYTES} bytes")
    match = _HANDLE.fullmatch(text)
    if match is None:  # not a handle: the field-by-field parse says why
        numbers, broker_name = _parse_fields(text)
    else:
        groups = match.groups()
        broker_name = groups[5]
        numbers = [int(field) for field in groups[:5] + groups[6:]]
        if max(numbers) > MAX_QUEUE_OFFSET:  # 19 digits can be more than 2**63-1
            name = _INT_FIELDS[next(i for i, v in enumerate(numbers) if v > MAX_QUEUE_OFFSET)]
            raise errors.InvalidReceiptHandle(f"{name} exceeds 2**63-1")
    (
        start_queue_offset,
        pop_time_ms,
        invisible_ms,
        revive_queue_id,
        topic_type_code,
        queue_id,
        queue_offset,
        physical_offset,
    ) = numbers

    if pop_time_ms > now_ms + MAX_CLOCK_SKEW_MS:
        raise errors.InvalidReceiptHandle("popTime lies in the future")
    if invisible_ms > MAX_HANDLE_INVISIBLE_MS:
        raise errors.InvalidReceiptHandle(
            f"invisibleTime {invisible_ms} ms exceeds {MAX_HANDLE_INVISIBLE_MS} ms"
        )
    _check_revive_queue_id(revive_queue_id, revive_queue_num)
    if topic_type_code == TopicType.RETRY_V1:
        raise errors.InvalidReceiptHandle("v1 retry handles are not issued by this broker")
    if topic_type_code not in (TopicType.NORMAL, TopicType.RETRY_V2):
        raise errors.InvalidReceiptHandle(f"unknown topicType {topic_type_code}")
    if expected_broker is not None and broker_name != expected_broker:
        raise errors.InvalidReceiptHandle(
            f"receipt handle belongs to broker {broker_name!r}, not {expected_broker!r}"
        )
    if queue_id > MAX_QUEUE_ID or (queue_num is not None and queue_id >= queue_num):
        raise errors.InvalidReceiptHandle(f"queueId {queue_id} out of range")
    if queue_offset < start_queue_offset:
        raise errors.InvalidReceiptHandle("queueOffset lies before the checkpoint's startOffset")
    return ReceiptHandle(
        start_queue_offset=start_queue_offset,
        pop_time_ms=pop_time_ms,
        invisible_ms=invisible_ms,
        revive_queue_id=revive_queue_id,
        topic_type=TopicType(topic_type_code),
        broker_name=broker_name,
        queue_id=queue_id,
        queue_offset=queue_offset,
        physical_offset=physical_offset,
    )


def _parse_fields(text: str) -> tuple[list[int], str]:
    """Rules 1-3 field by field: the integer fields in order and the broker name, or
    ``InvalidReceiptHandle`` naming the first rule ``text`` breaks."""
    if not text.isascii():
        raise errors.InvalidReceiptHandle("receipt handle contains non-ASCII characters")
    fields = text.split(" ")
    if len(fields) != FIELD_COUNT:
        raise errors.InvalidReceiptHandle(
            f"receipt handle has {len(fields)} space-separated fields, expected {FIELD_COUNT}"
        )
    ints = fields[:5] + fields[6:]
    numbers = [_parse_int(f, name) for f, name in zip(ints, _INT_FIELDS, strict=True)]
    if _BROKER_NAME.fullmatch(fields[5]) is None:
        raise errors.InvalidReceiptHandle("brokerName is empty or has illegal characters")
    return numbers, fields[5]


def _parse_int(field: str, name: str) -> int:
    """Parse one canonical non-negative decimal field below 2**63."""
    if _CANONICAL_INT.fullmatch(field) is None:
        raise errors.InvalidReceiptHandle(f"{name} is not a canonical non-negative integer")
    value = int(field)
    if value > MAX_QUEUE_OFFSET:
        raise errors.InvalidReceiptHandle(f"{name} exceeds 2**63-1")
    return value


def _check_revive_queue_id(revive_queue_id: int, revive_queue_num: int | None) -> None:
    if revive_queue_id == FIFO_REVIVE_QUEUE_ID:
        return
    limit = FIFO_REVIVE_QUEUE_ID if revive_queue_num is None else revive_queue_num
    if revive_queue_id >= limit:
        raise errors.InvalidReceiptHandle(
            f"reviveQid {revive_queue_id} is neither a revive queue nor the FIFO marker"
        )
