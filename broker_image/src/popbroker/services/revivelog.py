"""Appending to the revive log: CK, ACK and delay records as store messages.

The revive log is the system topic ``rmq_sys_REVIVE_LOG_<cluster>`` with one
queue per revive queue id (DESIGN §3.1). A record is a store message whose
``TAGS`` property is the record tag and whose body is the record body:

  * ``ck`` / ``ack`` / ``bAck`` — bodies from :mod:`popbroker.pop.records`;
  * ``delay`` — a DELAY message held until its delivery time
    (:mod:`popbroker.services.delaying`): the body is the message body, the
    properties say where and when to deliver it and carry the original
    properties as one JSON value.

Callers: popping and flushing (CKs), acking (ACKs and change-invisible CKs),
sending (delay records); reviving reads them back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from popbroker.pop import records
from popbroker.pop.checkpoints import Checkpoint
from popbroker.store import names
from popbroker.store.api import PROPERTY_TAGS, MessageToAppend, StoredMessage

DELAY_TAG = "delay"
PROPERTY_DELAY_TOPIC = "DELAY_TARGET_TOPIC"
PROPERTY_DELAY_QUEUE = "DELAY_TARGET_QUEUE"
PROPERTY_DELAY_DELIVER_MS = "DELAY_DELIVER_MS"
PROPERTY_DELAY_ORIGINAL = "DELAY_ORIGINAL_PROPERTIES"


def record_message(
    cluster: str, record: records.Record, *, revive_queue_id: int
) -> MessageToAppend:
    """The store message that appends ``record`` to revive queue ``revive_queue_id``."""
    encoded = records.encode(record)
    return MessageToAppend(
        topic=names.revive_topic(cluster),
        queue_id=revive_queue_id,
        body=encoded.body,
        properties={PROPERTY_TAGS: encoded.tag},
    )


def ck_message(cluster: str, ck: Checkpoint) -> MessageToAppend:
    """The store message of a checkpoint record (its revive queue is the CK's)."""
    return record_message(cluster, ck, revive_queue_id=ck.revive_queue_id)


@dataclass(frozen=True, slots=True)
class DelayRecord:
    """A DELAY message waiting in the revive log."""

    topic: str
    queue_id: int
    deliver_ms: int
    body: bytes
    properties: Mapping[str, str]
    born_timestamp_ms: int
    born_host: str


def delay_message(cluster: str, record: DelayRecord, *, revive_queue_id: int) -> MessageToAppend:
    """The store message that holds ``record`` in revive queue ``revive_queue_id``."""
    return MessageToAppend(
        topic=names.revive_topic(cluster),
        queue_id=revive_queue_id,
        body=record.body,
        properties={
            PROPERTY_TAGS: DELAY_TAG,
            PROPERTY_DELAY_TOPIC: record.topic,
            PROPERTY_DELAY_QUEUE: str(record.queue_id),
            PROPERTY_DELAY_DELIVER_MS: str(record.deliver_ms),
            PROPERTY_DELAY_ORIGINAL: json.dumps(dict(record.properties), separators=(",", ":")),
        },
        born_timestamp_ms=record.born_timestamp_ms,
        born_host=record.born_host,
    )


def parse_delay(stored: StoredMessage) -> DelayRecord | None:
    """The delay record in ``stored``, or None when it is malformed."""
    props = stored.properties
    topic = props.get(PROPERTY_DELAY_TOPIC, "")
    queue_raw = props.get(PROPERTY_DELAY_QUEUE, "")
    deliver_raw = props.get(PROPERTY_DELAY_DELIVER_MS, "")
    if not topic or not queue_raw.isdigit() or not deliver_raw.isdigit():
        return None
    try:
        original = json.loads(props.get(PROPERTY_DELAY_ORIGINAL, "{}"))
    except ValueError:
        return None
    if not isinstance(original, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in original.items()
    ):
        return None
    return DelayRecord(
        topic=topic,
        queue_id=int(queue_raw),
        deliver_ms=int(deliver_raw),
        body=stored.body,
        properties=original,
        born_timestamp_ms=stored.born_timestamp_ms,
        born_host=stored.born_host,
    )
