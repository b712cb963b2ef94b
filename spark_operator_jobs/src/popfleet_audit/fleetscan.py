"""Blocking reads of brokers through ``popfleet_api``, for the data source's driver and executors.

Spark calls the data source synchronously; the admin client is async. Each
function here runs its own event loop (a grpc.aio channel belongs to one loop)
and **streams**: :func:`stream_revive_log` and :func:`stream_offsets` drive the
client's async page iterator one page at a time, so an executor holds one page,
never a whole revive queue.

Revive-log partitions come as Arrow record batches in the column order and
types of :data:`popfleet_audit.schemas.REVIVE_LOG` (:func:`stream_revive_log_batches`,
thousands of records per batch from ``ScanReviveLogBatches``, converted with
column operations, never a Python object per record); PySpark takes such batches
from a data source as they are. :func:`stream_revive_log` is the older path, one
tuple per record from ``ScanReviveLog`` (the data source's ``transfer=records``).
The other tables' rows are plain tuples in the column order of
:mod:`popfleet_audit.schemas` (a few per queue or group).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema

from popfleet_api import models, revivebatches
from popfleet_api.client import BrokerAdmin
from popfleet_audit import schemas

T = TypeVar("T")
ScanRow = tuple[object, ...]
_PAGE_SIZE = 1024
_BATCH_RECORDS = 8192
# GetReviveStats: a broker's first call replays the newest records of every revive queue (later
# calls only what is new); on a big log and a busy broker that first call takes far longer than
# the client's 10 s default.
UNARY_TIMEOUT_S = 120.0
SCAN_TIMEOUT_S = 3_600.0  # one revive queue of a big log, read a page at a time


@dataclass(frozen=True, slots=True)
class ReviveQueueBounds:
    """Where a revive queue's log starts, ends and has been revived up to, at planning."""

    broker: str
    broker_name: str
    revive_queue_id: int
    min_queue_offset: int
    max_queue_offset: int
    progress_queue_offset: int  # revive progress, else min
    broker_now_ms: int


def run_with_admin(
    broker: str, token: str | None, work: Callable[[BrokerAdmin], Awaitable[T]]
) -> T:
    """Open a client for ``broker`` in a fresh loop, run ``work`` with it, close both."""

    async def _run() -> T:
        async with BrokerAdmin(broker, token=token, timeout_s=UNARY_TIMEOUT_S) as admin:
            return await work(admin)

    return asyncio.run(_run())


def revive_queue_bounds(broker: str, token: str | None) -> list[ReviveQueueBounds]:
    async def _work(admin: BrokerAdmin) -> list[ReviveQueueBounds]:
        info = await admin.info()
        stats = await admin.revive_stats()
        return [
            ReviveQueueBounds(
                broker=broker,
                broker_name=info.broker_name,
                revive_queue_id=q.revive_queue_id,
                min_queue_offset=q.min_queue_offset,
                max_queue_offset=q.max_queue_offset,
                progress_queue_offset=(
                    q.revive_queue_offset
                    if q.revive_queue_offset is not None
                    else q.min_queue_offset
                ),
                broker_now_ms=stats.now_ms,
            )
            for q in stats.queues
        ]

    return run_with_admin(broker, token, _work)


def _drive(
    broker: str, token: str | None, pages: Callable[[BrokerAdmin], object]
) -> Iterator[object]:
    """Yield the pages of ``pages(admin)`` (an async iterator), one loop step per page."""
    loop = asyncio.new_event_loop()

    async def _open() -> BrokerAdmin:
        return BrokerAdmin(
            broker, token=token, timeout_s=UNARY_TIMEOUT_S, scan_timeout_s=SCAN_TIMEOUT_S
        )

    admin = loop.run_until_complete(_open())
    iterator = pages(admin).__aiter__()  # type: ignore[attr-defined]
    try:
        while True:
            try:
                yield loop.run_until_complete(iterator.__anext__())
            except StopAsyncIteration:
                return
    finally:
        loop.run_until_complete(iterator.aclose())
        loop.run_until_complete(admin.close())
        loop.close()


def stream_revive_log(
    bounds: ReviveQueueBounds, *, start_queue_offset: int, end_queue_offset: int, token: str | None
) -> Iterator[ScanRow]:
    """Records of one revive queue in ``[start, end)``, as REVIVE_LOG rows."""
    wanted = end_queue_offset - start_queue_offset
    if wanted <= 0:
        return
    for page in _drive(
        bounds.broker,
        token,
        lambda admin: admin.scan_revive_log(
            bounds.revive_queue_id,
            from_queue_offset=start_queue_offset,
            page_size=_PAGE_SIZE,
            max_records=wanted,
        ),
    ):
        assert isinstance(page, models.ReviveLogPage)
        for record in page.records:
            if record.queue_offset >= end_queue_offset:
                return
            yield revive_row(bounds, record)


@cache
def revive_log_arrow_schema() -> Any:
    """:data:`schemas.REVIVE_LOG` as the Arrow schema PySpark expects of a data source."""
    return to_arrow_schema(schemas.REVIVE_LOG, timezone="UTC")


def stream_revive_log_batches(
    bounds: ReviveQueueBounds, *, start_queue_offset: int, end_queue_offset: int, token: str | None
) -> Iterator[Any]:
    """Records of one revive queue in ``[start, end)``, as REVIVE_LOG Arrow record batches."""
    wanted = end_queue_offset - start_queue_offset
    if wanted <= 0:
        return
    for batch in _drive(
        bounds.broker,
        token,
        lambda admin: admin.scan_revive_log_batches(
            bounds.revive_queue_id,
            from_queue_offset=start_queue_offset,
            batch_records=_BATCH_RECORDS,
            max_records=wanted,
        ),
    ):
        assert isinstance(batch, revivebatches.ReviveLogBatch)
        records = batch.records
        if records.num_rows and records.column("queue_offset")[-1].as_py() >= end_queue_offset:
            records = records.filter(pc.less(records.column("queue_offset"), end_queue_offset))
        if records.num_rows:
            yield revive_log_batch(bounds, records)


_KIND_NAMES = pa.array(revivebatches.KIND_NAMES, pa.string())


def revive_log_batch(bounds: ReviveQueueBounds, records: Any) -> Any:
    """Admin-API revive-log columns (``popfleet_api.revivebatches``) as a REVIVE_LOG batch.

    The same values :func:`revive_row` gives record by record: the broker's endpoint,
    name and clock on every row, kind names, and an ACK without a broker name carrying
    the local broker's (upstream #8460).
    """
    rows = records.num_rows
    kind = records.column("kind")
    is_ack = pc.is_in(kind, pa.array([2, 3], pa.int8()))
    broker_name = pa.scalar(bounds.broker_name, pa.string())
    ck_broker = pc.if_else(
        is_ack,
        pc.coalesce(records.column("broker_name"), broker_name),
        records.column("broker_name"),
    )
    offsets = records.column("queue_offset")
    columns = [
        pa.repeat(pa.scalar(bounds.broker, pa.string()), rows),
        pa.repeat(broker_name, rows),
        pa.repeat(pa.scalar(bounds.revive_queue_id, pa.int32()), rows),
        offsets,
        pc.add(offsets, 1),
        records.column("store_timestamp_ms"),
        pc.take(_KIND_NAMES, kind),
        *(records.column(name) for name in _PASSED_THROUGH),
        ck_broker,
        records.column("reput_times"),
        pa.repeat(pa.scalar(bounds.broker_now_ms, pa.int64()), rows),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=revive_log_arrow_schema())


_PASSED_THROUGH = (
    "tag", "topic", "group", "queue_id", "start_queue_offset", "pop_time_ms", "invisible_ms",
    "revive_time_ms", "ack_bitmap", "queue_offsets",
)  # fmt: skip


def revive_row(bounds: ReviveQueueBounds, record: models.ReviveRecord) -> ScanRow:
    """One revive-log record as a REVIVE_LOG row (see :mod:`popfleet_audit.schemas`)."""
    head = (
        bounds.broker,
        bounds.broker_name,
        record.revive_queue_id,
        record.queue_offset,
        record.next_queue_offset,
        record.store_timestamp_ms,
        record.kind.value,
        record.tag,
    )
    ck, ack, delay = record.checkpoint, record.ack, record.delay
    if ck is not None:
        body: tuple[object, ...] = (
            ck.topic, ck.group, ck.queue_id, ck.start_queue_offset, ck.pop_time_ms,
            ck.invisible_ms, ck.revive_time_ms, ck.ack_bitmap, list(ck.queue_offsets),
            ck.broker_name, ck.reput_times,
        )  # fmt: skip
    elif ack is not None:
        body = (
            ack.topic, ack.group, ack.queue_id, ack.start_queue_offset, ack.pop_time_ms,
            None, None, None, list(ack.ack_queue_offsets),
            ack.broker_name if ack.broker_name is not None else bounds.broker_name, None,
        )  # fmt: skip
    elif delay is not None:
        body = (delay.topic, None, delay.queue_id, None, None, None, None, None, None, None, None)
    else:
        body = (None,) * 11
    return (*head, *body, bounds.broker_now_ms)


def stream_offsets(broker: str, token: str | None) -> Iterator[ScanRow]:
    """The broker's consumer offset table, with store times, as OFFSETS rows."""
    broker_name, now_ms = run_with_admin(broker, token, _name_and_clock)
    for page in _drive(
        broker,
        token,
        lambda admin: admin.scan_offsets(page_size=_PAGE_SIZE, include_store_times=True),
    ):
        assert isinstance(page, models.OffsetTablePage)
        for row in page.rows:
            yield (
                broker, broker_name, row.key.group, row.key.topic, row.key.queue_id,
                row.committed_queue_offset, row.min_queue_offset, row.max_queue_offset,
                row.queue_exists, row.in_flight_messages, row.oldest_unconsumed_store_time_ms,
                now_ms,
            )  # fmt: skip


async def _name_and_clock(admin: BrokerAdmin) -> tuple[str, int]:
    info = await admin.info()
    return info.broker_name, info.now_ms


def revive_stats_rows(broker: str, token: str | None) -> tuple[list[ScanRow], list[ScanRow]]:
    """(REVIVE_QUEUES rows, GROUP_RETRY rows) of one broker, from one GetReviveStats."""

    async def _work(admin: BrokerAdmin) -> tuple[str, models.ReviveStats]:
        info = await admin.info()
        return info.broker_name, await admin.revive_stats()

    name, stats = run_with_admin(broker, token, _work)
    queues: list[ScanRow] = [
        (
            broker,
            name,
            q.revive_queue_id,
            q.min_queue_offset,
            q.max_queue_offset,
            q.revive_queue_offset,
            q.lag_messages,
            q.lag_ms,
            stats.now_ms,
        )
        for q in stats.queues
    ]
    groups: list[ScanRow] = [
        (broker, name, g.group, g.retry_messages, g.dlq_messages, stats.now_ms)
        for g in stats.groups
    ]
    return queues, groups
