"""Appending to the revive log: CK, ACK and delay records as store messages.

The revive log is the system topic ``rmq_sys_REVIVE_LOG_<cluster>`` with one
queue per revive queue id (DESIGN §3.1). A record is a store message whose
``TAGS`` property is the record tag; the envelope (tags, bodies, delay
properties) and its one decoder are owned by :mod:`popbroker.pop.revivelog`.
This module only builds the :class:`MessageToAppend` of each record:

  * ``ck`` / ``ack`` / ``bAck`` — bodies from :mod:`popbroker.pop.records`;
  * ``delay`` — a DELAY message held until its delivery time
    (:mod:`popbroker.services.delaying`): the body is the message body, the
    properties are :func:`popbroker.pop.revivelog.delay_properties`.

Callers: popping and checkpointing (CKs), acking (ACKs and change-invisible CKs),
sending (delay records). The revive role reads them back through
:func:`popbroker.pop.revivelog.decode`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from popbroker.pop import records
from popbroker.pop import revivelog as envelope
from popbroker.pop.checkpoints import Checkpoint
from popbroker.store import names
from popbroker.store.api import PROPERTY_TAGS, MessageToAppend


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
    delay = envelope.Delay(
        topic=record.topic,
        queue_id=record.queue_id,
        deliver_ms=record.deliver_ms,
        original_properties=record.properties,
    )
    return MessageToAppend(
        topic=names.revive_topic(cluster),
        queue_id=revive_queue_id,
        body=record.body,
        properties={PROPERTY_TAGS: envelope.DELAY_TAG, **envelope.delay_properties(delay)},
        born_timestamp_ms=record.born_timestamp_ms,
        born_host=record.born_host,
    )
