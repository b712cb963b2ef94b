"""Test helper: a ``StoredMessage`` with the commit-log record its fields encode."""

from __future__ import annotations

import dataclasses

from popbroker.store import format as fmt
from popbroker.store.api import StoredMessage


def with_record(message: StoredMessage) -> StoredMessage:
    """``message`` carrying the record a store would have read it from."""
    record = fmt.encode_record(
        physical_offset=message.physical_offset,
        queue_id=message.queue_id,
        queue_offset=message.queue_offset,
        flags=message.flags,
        born_timestamp_ms=message.born_timestamp_ms,
        store_timestamp_ms=message.store_timestamp_ms,
        reconsume_times=message.reconsume_times,
        topic=message.topic.encode(),
        born_host=message.born_host.encode(),
        properties=fmt.encode_properties(message.properties),
        body=message.body,
    )
    return dataclasses.replace(message, record=record)
