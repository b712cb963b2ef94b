"""Paged, resumable scans for the audit jobs: the revive log and the offset table.

Revive log (``ScanReviveLog``), as numbered steps:

  1. Validate: the revive queue exists (``NOT_FOUND``), the start position is
     ``>= 0`` and not beyond the queue's max (``OUT_OF_RANGE``), the page size
     is ``0..1024`` (0 = 256), ``max_records >= 0`` (0 = unbounded).
  2. Start at ``max(from, min)``: retention may have removed the oldest
     records; the first record's position tells the caller where it began.
  3. Read at most one page of records from the store, decode each (``ck``,
     ``ack``, ``bAck`` by :mod:`popbroker.pop.records`, ``delay`` by its
     properties; anything else is MALFORMED with the reason, never an error),
     and send the page with its resume position (the next queue offset) and
     whether it reached the end of the log as it was when read.
  4. Repeat until the end or ``max_records``. A caller resumes with the last
     ``next_queue_offset`` it saw, page or record.

Revive log in batches (``ScanReviveLogBatches``): the same steps, validation
and positions, with up to ``batch_records`` records (``0..65536``, 0 = 4096)
per message as one Arrow record batch built by
:mod:`popbroker.inspect.revivecolumns` (read from the store 1024 at a time with
``read_columns``: the same verified records without an object per message).

Offset table (``ScanOffsets``): one snapshot of the committed-offset rows,
sorted by (group, topic, queue id), filtered to rows after ``start_after``,
sent ``page_size`` rows at a time, each row with its queue's bounds and, when
asked, the store time of its oldest unconsumed message. A row's key is its
resume position; a page's ``resume_after`` is its last row's key.

Callers: :mod:`popbroker.admin.servicer`; :mod:`popbroker.pop.revivelog` decodes the records.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Protocol

from popbroker.admin.errors import InvalidArgument, NotFound, OutOfRange
from popbroker.inspect import inspecting, revivecolumns
from popbroker.inspect.popstate import PopStateProvider
from popbroker.pop import records, revivelog
from popbroker.pop.checkpoints import Checkpoint, QueueKey
from popbroker.store import names
from popbroker.store.api import (
    PROPERTY_TAGS,
    CommittedOffset,
    MessageColumns,
    QueueBounds,
    ReadStatus,
    StoreApi,
    StoredMessage,
)
from popbroker.store.errors import UnknownTopic
from popfleet_api import revivebatches
from popfleet_api.admin.v1 import admin_pb2 as pb

DEFAULT_PAGE_SIZE = 256
MAX_PAGE_SIZE = 1024
DEFAULT_BATCH_RECORDS = 4096
MAX_BATCH_RECORDS = 65536
_STORE_READ = 1024  # the store's largest read


def page_size_of(requested: int) -> int:
    """The page size a request asks for (0 = the default), else ``InvalidArgument``."""
    if requested == 0:
        return DEFAULT_PAGE_SIZE
    if not 1 <= requested <= MAX_PAGE_SIZE:
        raise InvalidArgument(
            f"page_size {requested} out of range 0..{MAX_PAGE_SIZE}", reason="BAD_COUNT"
        )
    return requested


# ---------------------------------------------------------------- records


def record_to_pb(message: StoredMessage, *, revive_queue_id: int) -> pb.ReviveRecord:
    tag = message.properties.get(PROPERTY_TAGS, "")
    out = pb.ReviveRecord(
        revive_queue_id=revive_queue_id,
        queue_offset=message.queue_offset,
        next_queue_offset=message.queue_offset + 1,
        store_timestamp_ms=message.store_timestamp_ms,
        tag=tag,
    )
    decoded = revivelog.decode(
        tag, message.properties, message.body, revive_queue_id=revive_queue_id
    )
    reason = revivecolumns.out_of_range(decoded)
    if reason is not None:
        decoded = revivelog.Malformed(reason)  # as ScanReviveLogBatches says it
    if isinstance(decoded, Checkpoint):
        out.kind = pb.REVIVE_RECORD_KIND_CHECKPOINT
        out.checkpoint.CopyFrom(
            pb.CheckpointRecord(
                topic=decoded.topic,
                group=decoded.group,
                queue_id=decoded.queue_id,
                start_queue_offset=decoded.start_queue_offset,
                pop_time_ms=decoded.pop_time_ms,
                invisible_ms=decoded.invisible_ms,
                revive_time_ms=decoded.pop_time_ms + decoded.invisible_ms,
                ack_bitmap=decoded.ack_bitmap,
                queue_offset_diffs=list(decoded.queue_offset_diffs),
                queue_offsets=[decoded.start_queue_offset + d for d in decoded.queue_offset_diffs],
                broker_name=decoded.broker_name,
                reput_times=decoded.reput_times,
            )
        )
    elif isinstance(decoded, records.AckRecord):
        out.kind = (
            pb.REVIVE_RECORD_KIND_BATCH_ACK if decoded.is_batch else pb.REVIVE_RECORD_KIND_ACK
        )
        out.ack.CopyFrom(
            pb.AckRecord(
                topic=decoded.topic,
                group=decoded.group,
                queue_id=decoded.queue_id,
                start_queue_offset=decoded.start_queue_offset,
                pop_time_ms=decoded.pop_time_ms,
                broker_name=decoded.broker_name,
                ack_queue_offsets=list(decoded.ack_queue_offsets),
            )
        )
    elif isinstance(decoded, revivelog.Delay):
        out.kind = pb.REVIVE_RECORD_KIND_DELAY
        out.delay.CopyFrom(
            pb.DelayRecord(
                topic=decoded.topic,
                queue_id=decoded.queue_id,
                deliver_time_ms=decoded.deliver_ms,
            )
        )
    else:
        out.kind = pb.REVIVE_RECORD_KIND_MALFORMED
        out.malformed_reason = decoded.reason
    return out


# ---------------------------------------------------------------- revive log


async def _revive_scan_start(
    store: StoreApi,
    *,
    cluster: str,
    revive_queue_id: int,
    from_queue_offset: int,
    max_records: int,
) -> tuple[QueueBounds, int]:
    """Step 1 and 2: the queue's bounds and the position to start at (else a refusal)."""
    if revive_queue_id < 0:
        raise InvalidArgument(f"revive_queue_id {revive_queue_id} must be >= 0", reason="BAD_COUNT")
    if from_queue_offset < 0:
        raise InvalidArgument("from_queue_offset must be >= 0", reason="BAD_COUNT")
    if max_records < 0:
        raise InvalidArgument("max_records must be >= 0 (0 = no limit)", reason="BAD_COUNT")
    topic = names.revive_topic(cluster)
    try:
        bounds = await store.bounds(topic, revive_queue_id)
    except UnknownTopic:
        raise NotFound(
            f"revive queue {revive_queue_id} does not exist", reason="UNKNOWN_REVIVE_QUEUE"
        ) from None
    if from_queue_offset > bounds.max_queue_offset:
        raise OutOfRange(
            f"from_queue_offset {from_queue_offset} is beyond the end "
            f"({bounds.max_queue_offset}) of revive queue {revive_queue_id}",
            reason="BEYOND_END",
        )
    return bounds, max(from_queue_offset, bounds.min_queue_offset)


async def revive_log_pages(
    store: StoreApi, *, cluster: str, request: pb.ScanReviveLogRequest
) -> AsyncIterator[pb.ReviveLogPage]:
    """Steps 1-4 of the module docstring."""
    revive_queue_id = request.revive_queue_id
    bounds, position = await _revive_scan_start(
        store,
        cluster=cluster,
        revive_queue_id=revive_queue_id,
        from_queue_offset=request.from_queue_offset,
        max_records=request.max_records,
    )
    page_size = page_size_of(request.page_size)
    topic = names.revive_topic(cluster)
    remaining = request.max_records or None
    low, high = bounds.min_queue_offset, bounds.max_queue_offset
    while True:
        count = page_size if remaining is None else min(page_size, remaining)
        result = await store.read(topic, revive_queue_id, position, max_count=count, max_scan=count)
        low, high = result.min_queue_offset, result.max_queue_offset
        if result.status is ReadStatus.OFFSET_TOO_SMALL and position < low:
            position = low  # retention ran between pages; go on from the new minimum
            continue
        messages: Sequence[StoredMessage] = ()
        if result.status is ReadStatus.FOUND:
            messages = result.messages
            position = result.next_queue_offset
        end = position >= high
        page = pb.ReviveLogPage(
            revive_queue_id=revive_queue_id,
            records=[record_to_pb(m, revive_queue_id=revive_queue_id) for m in messages],
            next_queue_offset=position,
            min_queue_offset=low,
            max_queue_offset=high,
            end_of_log=end,
        )
        if remaining is not None:
            remaining -= len(messages)
        yield page
        if end or not messages or remaining == 0:
            return


class ColumnStore(StoreApi, Protocol):
    """The store as the batch scan reads it: ``StoreApi`` plus bulk reads (``LocalStore``)."""

    def read_columns(
        self, topic: str, queue_id: int, queue_offset: int, *, max_count: int
    ) -> MessageColumns: ...


async def revive_log_batches(
    store: ColumnStore, *, cluster: str, request: pb.ScanReviveLogBatchesRequest
) -> AsyncIterator[pb.ReviveLogBatch]:
    """The revive log as Arrow batches (see the module docstring)."""
    revive_queue_id = request.revive_queue_id
    bounds, position = await _revive_scan_start(
        store,
        cluster=cluster,
        revive_queue_id=revive_queue_id,
        from_queue_offset=request.from_queue_offset,
        max_records=request.max_records,
    )
    batch_records = request.batch_records or DEFAULT_BATCH_RECORDS
    if not 1 <= batch_records <= MAX_BATCH_RECORDS:
        raise InvalidArgument(
            f"batch_records {batch_records} out of range 0..{MAX_BATCH_RECORDS}",
            reason="BAD_COUNT",
        )
    topic = names.revive_topic(cluster)
    remaining = request.max_records or None
    low, high = bounds.min_queue_offset, bounds.max_queue_offset
    while True:
        wanted = batch_records if remaining is None else min(batch_records, remaining)
        read = MessageColumns(ReadStatus.FOUND, [], [], [], [], position, low, high)
        while len(read.queue_offsets) < wanted:
            count = min(_STORE_READ, wanted - len(read.queue_offsets))
            result = store.read_columns(topic, revive_queue_id, position, max_count=count)
            low, high = result.min_queue_offset, result.max_queue_offset
            if result.status is ReadStatus.OFFSET_TOO_SMALL and position < low:
                position = low  # retention ran between reads; go on from the new minimum
                continue
            if result.status is not ReadStatus.FOUND:
                break
            read.queue_offsets.extend(result.queue_offsets)
            read.store_timestamps_ms.extend(result.store_timestamps_ms)
            read.properties.extend(result.properties)
            read.bodies.extend(result.bodies)
            position = result.next_queue_offset
            await asyncio.sleep(0)  # let other calls in between reads
        records = len(read.queue_offsets)
        batch = revivecolumns.batch_of(read, revive_queue_id=revive_queue_id)
        end = position >= high
        yield pb.ReviveLogBatch(
            revive_queue_id=revive_queue_id,
            format=pb.REVIVE_BATCH_FORMAT_ARROW_IPC_V1,
            arrow_ipc=revivebatches.to_ipc(batch) if records else b"",
            record_count=records,
            next_queue_offset=position,
            min_queue_offset=low,
            max_queue_offset=high,
            end_of_log=end,
        )
        if remaining is not None:
            remaining -= records
        if end or not records or remaining == 0:
            return


# ---------------------------------------------------------------- offset table


async def offset_table_pages(
    store: StoreApi,
    pop_state: PopStateProvider,
    *,
    request: pb.ScanOffsetsRequest,
) -> AsyncIterator[pb.OffsetTablePage]:
    """The offset table in pages (see the module docstring)."""
    page_size = page_size_of(request.page_size)
    group = request.group if request.HasField("group") else None
    if group is not None and not names.NAME_PATTERN.fullmatch(group):
        raise InvalidArgument(f"group name {group!r} is not a valid name", reason="BAD_NAME")
    rows = await store.committed_offsets(group)
    if group is not None and not rows and group not in {g.name for g in await store.groups()}:
        raise NotFound(f"group {group!r} does not exist", reason="UNKNOWN_GROUP")
    if request.HasField("start_after"):
        after = (request.start_after.group, request.start_after.topic, request.start_after.queue_id)
        rows = [r for r in rows if (r.group, r.topic, r.queue_id) > after]
    rows.sort(key=lambda r: (r.group, r.topic, r.queue_id))
    if not rows:
        yield pb.OffsetTablePage(end_of_table=True)
        return
    for start in range(0, len(rows), page_size):
        chunk = rows[start : start + page_size]
        in_flight = await pop_state.in_flight(
            [QueueKey(r.topic, r.group, r.queue_id) for r in chunk]
        )
        page = pb.OffsetTablePage(end_of_table=start + page_size >= len(rows))
        for row in chunk:
            page.rows.append(
                await _offset_row(
                    store, row, in_flight, include_store_times=request.include_store_times
                )
            )
        last = chunk[-1]
        page.resume_after.CopyFrom(
            pb.OffsetTableKey(group=last.group, topic=last.topic, queue_id=last.queue_id)
        )
        yield page


async def _offset_row(
    store: StoreApi,
    row: CommittedOffset,
    in_flight: Mapping[QueueKey, int],
    *,
    include_store_times: bool,
) -> pb.OffsetTableRow:
    out = pb.OffsetTableRow(
        key=pb.OffsetTableKey(group=row.group, topic=row.topic, queue_id=row.queue_id),
        committed_queue_offset=row.queue_offset,
    )
    try:
        bounds = await store.bounds(row.topic, row.queue_id)
    except UnknownTopic:
        return out  # queue_exists stays false
    out.queue_exists = True
    out.min_queue_offset = bounds.min_queue_offset
    out.max_queue_offset = bounds.max_queue_offset
    count = in_flight.get(QueueKey(row.topic, row.group, row.queue_id))
    if count is not None:
        out.in_flight_messages = count
    if include_store_times:
        oldest = await inspecting.oldest_unconsumed_store_time(store, bounds, row.queue_offset)
        if oldest is not None:
            out.oldest_unconsumed_store_time_ms = oldest
    return out
