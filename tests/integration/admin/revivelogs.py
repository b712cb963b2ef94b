"""Helpers that write what the popack and revive roles would: revive-log records, progress."""

from __future__ import annotations

from popbroker.pop import checkpoints, records
from popbroker.pop.checkpoints import Checkpoint
from popbroker.store import names
from popbroker.store.api import PROPERTY_TAGS, MessageToAppend, StoreApi
from tests.integration.admin.conftest import BROKER, CLUSTER

REVIVE_TOPIC = names.revive_topic(CLUSTER)


def checkpoint(
    queue_offsets: tuple[int, ...],
    *,
    topic: str = "orders",
    group: str = "billing",
    queue_id: int = 0,
    pop_time_ms: int,
    invisible_ms: int = 60_000,
    revive_queue_id: int = 0,
) -> Checkpoint:
    return checkpoints.from_queue_offsets(
        queue_offsets,
        topic=topic,
        group=group,
        queue_id=queue_id,
        start_queue_offset=queue_offsets[0],
        pop_time_ms=pop_time_ms,
        invisible_ms=invisible_ms,
        revive_queue_id=revive_queue_id,
        broker_name=BROKER,
    )


async def append_record(store: StoreApi, record: records.Record, *, revive_queue_id: int) -> int:
    """Append ``record`` to a revive queue; returns its position."""
    encoded = records.encode(record)
    [result] = await store.append(
        [
            MessageToAppend(
                topic=REVIVE_TOPIC,
                queue_id=revive_queue_id,
                body=encoded.body,
                properties={PROPERTY_TAGS: encoded.tag},
            )
        ]
    )
    return result.queue_offset


async def append_raw(
    store: StoreApi, *, tag: str, body: bytes, revive_queue_id: int, **properties: str
) -> int:
    [result] = await store.append(
        [
            MessageToAppend(
                topic=REVIVE_TOPIC,
                queue_id=revive_queue_id,
                body=body,
                properties={PROPERTY_TAGS: tag, **properties},
            )
        ]
    )
    return result.queue_offset


async def set_revive_progress(store: StoreApi, revive_queue_id: int, queue_offset: int) -> None:
    await store.commit_offset(
        group=names.REVIVE_GROUP,
        topic=REVIVE_TOPIC,
        queue_id=revive_queue_id,
        queue_offset=queue_offset,
    )
