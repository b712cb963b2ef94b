"""Decoding revive-log records as the admin API reports them (pure).

The revive log (``rmq_sys_REVIVE_LOG_<cluster>``) holds ``ck``, ``ack`` and
``bAck`` records (bodies owned by :mod:`popbroker.pop.records`) and the revive
role's ``delay`` records (a DELAY message held until its time; the layout is
owned by ``popbroker.services.revivelog``, whose constants are repeated here
because the admin server must not import the services -- a unit test checks
that both agree). Anything else, or a body that does not decode, is reported
as :class:`Malformed` with the reason: a scan never fails on a bad record.

Callers: :mod:`popbroker.admin.scanning` (scan pages) and
:mod:`popbroker.admin.popstate` (in-flight counts from the store).
"""

from __future__ import annotations

from dataclasses import dataclass

from popbroker.pop import errors as pop_errors
from popbroker.pop import records
from popbroker.pop.checkpoints import Checkpoint
from popbroker.store.api import PROPERTY_TAGS, StoredMessage

DELAY_TAG = "delay"
PROPERTY_DELAY_TOPIC = "DELAY_TARGET_TOPIC"
PROPERTY_DELAY_QUEUE = "DELAY_TARGET_QUEUE"
PROPERTY_DELAY_DELIVER_MS = "DELAY_DELIVER_MS"
# The revive role's progress is the committed offset of this group on each revive queue.
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"


@dataclass(frozen=True, slots=True)
class Delay:
    """Where and when a held DELAY message is to be delivered."""

    topic: str
    queue_id: int
    deliver_time_ms: int


@dataclass(frozen=True, slots=True)
class Malformed:
    """A record of an unknown tag or with a body that does not decode."""

    reason: str


Decoded = Checkpoint | records.AckRecord | Delay | Malformed


def decode(message: StoredMessage, *, revive_queue_id: int) -> Decoded:
    """What one revive-log record holds; never raises for a bad record."""
    tag = message.properties.get(PROPERTY_TAGS, "")
    if tag == DELAY_TAG:
        props = message.properties
        topic = props.get(PROPERTY_DELAY_TOPIC, "")
        queue_raw = props.get(PROPERTY_DELAY_QUEUE, "")
        deliver_raw = props.get(PROPERTY_DELAY_DELIVER_MS, "")
        if not topic or not queue_raw.isdigit() or not deliver_raw.isdigit():
            return Malformed("delay record without a target topic, queue or delivery time")
        return Delay(topic=topic, queue_id=int(queue_raw), deliver_time_ms=int(deliver_raw))
    try:
        return records.decode(tag, message.body, revive_queue_id=revive_queue_id)
    except pop_errors.MalformedRecord as exc:
        return Malformed(str(exc))
