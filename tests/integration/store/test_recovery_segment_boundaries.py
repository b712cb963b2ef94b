"""Segment boundaries: batches that end a segment exactly, or straddle it, stay whole.

Found by the crash test: a batch whose record ended exactly at a segment's end
and was followed by another record of the same batch was written as one chunk
across the boundary, which the segment layer refuses mid-batch. These cases are
built deliberately here, then the store is reopened and read back byte for byte.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from popbroker.store import format as fmt
from popbroker.store.api import PROPERTY_TAGS, AppendResult, MessageToAppend, TopicConfig
from popbroker.store.local import LocalStore
from tests.integration.store import _proc, faults

HOST = _proc.BORN_HOST


def _message(queue_offset: int, body: bytes) -> MessageToAppend:
    return MessageToAppend(
        topic=faults.TOPIC,
        queue_id=0,
        body=body,
        properties={PROPERTY_TAGS: _proc.tag_for(queue_offset)},
        born_host=HOST,
    )


def _written(result: AppendResult, body: bytes) -> faults.Written:
    return faults.Written(
        topic=result.topic,
        queue_id=result.queue_id,
        queue_offset=result.queue_offset,
        physical_offset=result.physical_offset,
        size=result.size,
        body=body,
        tag=_proc.tag_for(result.queue_offset),
    )


def _body_of_record_size(queue_offset: int, size: int) -> bytes:
    """A body that makes the record exactly ``size`` bytes long."""
    overhead = fmt.encoded_size(
        topic=faults.TOPIC.encode(),
        born_host=HOST.encode(),
        properties=fmt.encode_properties({PROPERTY_TAGS: _proc.tag_for(queue_offset)}),
        body=b"",
    )
    assert size > overhead
    return bytes([queue_offset % 251 + 1]) * (size - overhead)


@pytest.mark.parametrize(
    "leave",
    [0, 1, fmt.FILLER_MIN - 1, fmt.FILLER_MIN, 200],
    ids=lambda n: f"leave{n}",
)
def test_a_batch_around_a_segment_end_is_written_whole_and_recovers(
    tmp_path: Path, leave: int
) -> None:
    """The first record of a batch ends ``leave`` bytes before the segment end."""
    settings = faults.settings()

    async def scenario() -> list[faults.Written]:
        store = LocalStore.open(tmp_path, settings)
        written: list[faults.Written] = []
        try:
            await store.put_topic(TopicConfig(faults.TOPIC, 1, 1))
            offset = 0
            # fill the first segment until a record of at most ~10 KB can end it
            while settings.segment_bytes - store.commitlog.end > 10_000:
                body = _proc.body_for(1, 0, offset)
                [r] = await store.append([_message(offset, body)])
                written.append(_written(r, body))
                offset += 1
            boundary = settings.segment_bytes
            first = _body_of_record_size(offset, boundary - store.commitlog.end - leave)
            bodies = [first, b"after", b"and more"]
            batch = [_message(offset + i, body) for i, body in enumerate(bodies)]
            results = await store.append(batch)
            written.extend(_written(r, body) for r, body in zip(results, bodies, strict=True))
            assert results[0].physical_offset + results[0].size == boundary - leave
        finally:
            await store.close()
        return written

    written = asyncio.run(scenario())
    store = faults.open_store(tmp_path, settings)
    try:
        faults.assert_reads_exactly(store, written, queues=1)
    finally:
        store.close_sync()
