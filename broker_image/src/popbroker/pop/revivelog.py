"""The revive-log envelope: what one revive-log message holds, encoded and decoded once.

Purpose: the revive log (``rmq_sys_REVIVE_LOG_<cluster>``, one queue per
revive queue id) holds store messages whose ``TAGS`` property is a record tag.
This module is the one place that turns a message's tag, properties and body
into a value, and the delay record's values back into properties. It is pure:
the store message types stay at the edges (``popbroker.services.revivelog``
builds the messages to append; the revive role and the admin scans pass a
read message's parts to :func:`decode`).

Envelope, by tag:

  * ``ck`` / ``ack`` / ``bAck`` — the body is a record body of
    :mod:`popbroker.pop.records`; the properties carry nothing else.
  * ``delay`` — a DELAY message held until its delivery time: the body is the
    message body, and the properties say where and when to deliver it:

        ``DELAY_TARGET_TOPIC``         target topic (non-empty)
        ``DELAY_TARGET_QUEUE``         target queue id (decimal digits)
        ``DELAY_DELIVER_MS``           delivery time, ms since the epoch (digits)
        ``DELAY_ORIGINAL_PROPERTIES``  the message's own properties, one compact
                                       JSON object of strings (absent = ``{}``)

Decoding never raises for a bad record: an unknown tag, a body that
:func:`popbroker.pop.records.decode` refuses or a delay without its target is
:class:`Malformed` with the reason, so a scan counts it and moves on.

Callers: ``popbroker.services.revivelog`` (delay properties),
``popbroker.services.revivequeue`` (the revive role's scan and delay
delivery), ``popbroker.admin.scanning`` and ``popbroker.inspect.popstate`` (scans
and in-flight counts from the store).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from popbroker.pop import errors, records
from popbroker.pop.checkpoints import Checkpoint

DELAY_TAG: Final = "delay"
PROPERTY_DELAY_TOPIC: Final = "DELAY_TARGET_TOPIC"
PROPERTY_DELAY_QUEUE: Final = "DELAY_TARGET_QUEUE"
PROPERTY_DELAY_DELIVER_MS: Final = "DELAY_DELIVER_MS"
PROPERTY_DELAY_ORIGINAL: Final = "DELAY_ORIGINAL_PROPERTIES"


@dataclass(frozen=True, slots=True)
class Delay:
    """Where and when a held DELAY message is to be delivered, with its own properties."""

    topic: str
    queue_id: int
    deliver_ms: int
    original_properties: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Malformed:
    """A record of an unknown tag or with a body or properties that do not decode."""

    reason: str


Decoded = Checkpoint | records.AckRecord | Delay | Malformed


def delay_properties(delay: Delay) -> dict[str, str]:
    """The envelope properties of a delay record (the caller adds the ``TAGS`` property)."""
    return {
        PROPERTY_DELAY_TOPIC: delay.topic,
        PROPERTY_DELAY_QUEUE: str(delay.queue_id),
        PROPERTY_DELAY_DELIVER_MS: str(delay.deliver_ms),
        PROPERTY_DELAY_ORIGINAL: json.dumps(dict(delay.original_properties), separators=(",", ":")),
    }


def decode(
    tag: str, properties: Mapping[str, str], body: bytes, *, revive_queue_id: int
) -> Decoded:
    """What one revive-log message holds (see the module docstring); never raises."""
    if tag == DELAY_TAG:
        return _decode_delay(properties)
    try:
        return records.decode(tag, body, revive_queue_id=revive_queue_id)
    except errors.MalformedRecord as exc:
        return Malformed(str(exc))


def _decode_delay(properties: Mapping[str, str]) -> Delay | Malformed:
    topic = properties.get(PROPERTY_DELAY_TOPIC, "")
    queue_raw = properties.get(PROPERTY_DELAY_QUEUE, "")
    deliver_raw = properties.get(PROPERTY_DELAY_DELIVER_MS, "")
    if not topic or not _is_digits(queue_raw) or not _is_digits(deliver_raw):
        return Malformed("delay record without a target topic, queue or delivery time")
    try:
        original = json.loads(properties.get(PROPERTY_DELAY_ORIGINAL, "{}"))
    except ValueError:
        return Malformed("delay record with original properties that are not JSON")
    if not isinstance(original, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in original.items()
    ):
        return Malformed("delay record with original properties that are not strings")
    return Delay(
        topic=topic,
        queue_id=int(queue_raw),
        deliver_ms=int(deliver_raw),
        original_properties=original,
    )


def _is_digits(text: str) -> bool:
    return text.isascii() and text.isdigit()  # str.isdigit alone admits "²", which int() refuses
