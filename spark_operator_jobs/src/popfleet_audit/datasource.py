"""The ``popfleet`` PySpark Python data source: broker tables read through the admin API.

    spark.read.format("popfleet")
        .option("brokers", "10.0.0.7:9877,10.0.0.8:9877")
        .option("table", "revive_log")            # or revive_keys, offsets, revive_queues,
                                                  # group_retry
        .option("tokenFile", "/var/run/secrets/popfleet/token")   # optional
        .option("startPositions", '{"broker-0/0": 1200}')          # revive_log, optional
        .option("endPositions", '{"broker-0/0": 5000}')            # revive_log, optional
        .option("from", "progress")               # revive_log without a start: progress|earliest
        .option("transfer", "batches")            # revive_log: batches (Arrow) | records
        .load()

Partitions (so executors read brokers in parallel): ``revive_log`` and
``revive_keys`` have one per (broker, revive queue); ``offsets``,
``revive_queues`` and ``group_retry`` one per broker. ``revive_keys`` is the
revive log with the audit's CK/ACK matching pushed down to the partition
(:mod:`.ckmatch`: a CK and its ACKs share a revive queue, so a whole revive queue
is all the matching needs): a row per CK key, orphan key and revive queue instead
of a row per record, with the same options.

Planning (on the driver) asks each broker for its revive queues' bounds; a
revive-log partition then reads ``[start, end)`` with a streaming scan, where

  1. ``end`` is ``endPositions[name/queue]`` or the queue's end at planning (a
     snapshot: records appended later are left for the next read);
  2. ``start`` is ``startPositions[name/queue]``, else the revive progress
     (``from=progress``: everything before it is resolved) or the queue's min
     (``from=earliest``); a start below the min (retention) reads from the min,
     and a start beyond the queue's end means the log was reset: read from min.

:func:`plan_revive_log` is the same planning for a job that wants to record
the end positions it read to (its next run starts there). Position keys are
``<broker name>/<revive queue id>``: broker names are stable, endpoints not.
Bad options raise :class:`DataSourceOptionError` before any partition is read.

``transfer`` says how a revive-log partition travels: ``batches`` (the default)
reads Arrow record batches (``ScanReviveLogBatches``, or the client's fallback
for an older broker) and hands them to Spark as they are; ``records`` is the
older path, a Python tuple per record from ``ScanReviveLog`` (kept to compare
and measure, ``bench/audit_throughput.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from popfleet_audit import ckmatch, fleetscan, schemas
from popfleet_audit.fleetscan import ReviveQueueBounds, ScanRow

FROM_CHOICES = ("progress", "earliest")
REVIVE_LOG_TABLES = ("revive_log", "revive_keys")
TRANSFER_CHOICES = ("batches", "records")


class DataSourceOptionError(ValueError):
    """An option of the ``popfleet`` data source is missing or malformed."""


@dataclass(frozen=True, slots=True)
class ReviveLogPartition(InputPartition):
    bounds: ReviveQueueBounds
    start_queue_offset: int
    end_queue_offset: int

    @property
    def key(self) -> str:
        return position_key(self.bounds.broker_name, self.bounds.revive_queue_id)


@dataclass(frozen=True, slots=True)
class BrokerPartition(InputPartition):
    broker: str


def position_key(broker_name: str, revive_queue_id: int) -> str:
    return f"{broker_name}/{revive_queue_id}"


def parse_positions(text: str | None, option: str) -> dict[str, int]:
    if not text:
        return {}
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataSourceOptionError(f"{option}: not JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise DataSourceOptionError(f"{option}: want an object of 'name/queue': position")
    positions: dict[str, int] = {}
    for key, value in raw.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise DataSourceOptionError(f"{option}: {key!r} -> {value!r} is not a position")
        name, _, queue = str(key).rpartition("/")
        if not name or not queue.isdigit():
            raise DataSourceOptionError(f"{option}: key {key!r} is not '<broker name>/<queue id>'")
        positions[key] = value
    return positions


def parse_brokers(text: str | None) -> tuple[str, ...]:
    brokers = tuple(p.strip() for p in (text or "").split(",") if p.strip())
    if not brokers:
        raise DataSourceOptionError("brokers: want 'HOST:PORT[,HOST:PORT...]'")
    return brokers


def read_token(path: str | None) -> str | None:
    if not path:
        return None
    token = Path(path).read_text().strip()
    if not token:
        raise DataSourceOptionError(f"tokenFile: {path} is empty")
    return token


def plan_revive_log(
    brokers: Sequence[str],
    *,
    token: str | None,
    start_positions: Mapping[str, int] | None = None,
    end_positions: Mapping[str, int] | None = None,
    start_from: str = "progress",
) -> list[ReviveLogPartition]:
    """One partition per (broker, revive queue) with its ``[start, end)`` (module docstring)."""
    if start_from not in FROM_CHOICES:
        raise DataSourceOptionError(f"from: {start_from!r} (want one of {FROM_CHOICES})")
    starts, ends = start_positions or {}, end_positions or {}
    partitions: list[ReviveLogPartition] = []
    for broker in brokers:
        for bounds in fleetscan.revive_queue_bounds(broker, token):
            key = position_key(bounds.broker_name, bounds.revive_queue_id)
            end = min(ends.get(key, bounds.max_queue_offset), bounds.max_queue_offset)
            default = bounds.progress_queue_offset if start_from == "progress" else 0
            start = starts.get(key, default)
            if start > bounds.max_queue_offset:
                start = bounds.min_queue_offset  # the log was reset under us
            start = max(start, bounds.min_queue_offset)
            partitions.append(ReviveLogPartition(bounds, start, max(start, end)))
    return partitions


def positions_json(partitions: Sequence[ReviveLogPartition], *, ends: bool) -> str:
    return json.dumps(
        {p.key: (p.end_queue_offset if ends else p.start_queue_offset) for p in partitions},
        sort_keys=True,
    )


class PopfleetReader(DataSourceReader):
    """Reads one table; see the module docstring for options and partitions."""

    def __init__(self, options: Mapping[str, str], table: str) -> None:
        self._table = table
        self._brokers = parse_brokers(options.get("brokers"))
        self._token_file = options.get("tokenFile")
        self._starts = parse_positions(options.get("startPositions"), "startPositions")
        self._ends = parse_positions(options.get("endPositions"), "endPositions")
        self._from = options.get("from", "progress")
        if self._from not in FROM_CHOICES:
            raise DataSourceOptionError(f"from: {self._from!r} (want one of {FROM_CHOICES})")
        self._transfer = options.get("transfer", "batches")
        if self._transfer not in TRANSFER_CHOICES:
            raise DataSourceOptionError(
                f"transfer: {self._transfer!r} (want one of {TRANSFER_CHOICES})"
            )

    def partitions(self) -> Sequence[InputPartition]:
        if self._table not in REVIVE_LOG_TABLES:
            return [BrokerPartition(broker) for broker in self._brokers]
        return plan_revive_log(
            self._brokers,
            token=read_token(self._token_file),
            start_positions=self._starts,
            end_positions=self._ends,
            start_from=self._from,
        )

    def read(self, partition: InputPartition) -> Iterator[ScanRow] | Iterator[Any]:
        token = read_token(self._token_file)
        if isinstance(partition, ReviveLogPartition):
            stream = (
                fleetscan.stream_revive_log_batches
                if self._transfer == "batches"
                else fleetscan.stream_revive_log
            )
            records = stream(
                partition.bounds,
                start_queue_offset=partition.start_queue_offset,
                end_queue_offset=partition.end_queue_offset,
                token=token,
            )
            if self._table == "revive_keys":
                batches = records if self._transfer == "batches" else rows_as_batches(records)
                yield from ckmatch.match_batches(batches)
            else:
                yield from records
            return
        assert isinstance(partition, BrokerPartition)
        if self._table == "offsets":
            yield from fleetscan.stream_offsets(partition.broker, token)
            return
        queues, groups = fleetscan.revive_stats_rows(partition.broker, token)
        yield from queues if self._table == "revive_queues" else groups


def rows_as_batches(rows: Iterator[Any], size: int = 8192) -> Iterator[Any]:
    """REVIVE_LOG rows (``transfer=records``) as Arrow record batches of ``size`` rows."""
    schema = fleetscan.revive_log_arrow_schema()
    chunk: list[Any] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == size:
            yield _batch(chunk, schema)
            chunk = []
    if chunk:
        yield _batch(chunk, schema)


def _batch(rows: list[Any], schema: Any) -> Any:
    columns = list(zip(*rows, strict=True))
    return pa.RecordBatch.from_arrays(
        [pa.array(column, field.type) for column, field in zip(columns, schema, strict=True)],
        schema=schema,
    )


class PopfleetDataSource(DataSource):
    """``spark.read.format("popfleet")``: broker tables through the admin API."""

    @classmethod
    def name(cls) -> str:
        return "popfleet"

    def _table(self) -> str:
        table = str(self.options.get("table", ""))
        if table not in schemas.TABLES:
            raise DataSourceOptionError(f"table: {table!r} (want one of {sorted(schemas.TABLES)})")
        return table

    def schema(self) -> StructType:
        schema: StructType = schemas.TABLES[self._table()]
        return schema

    def reader(self, schema: StructType) -> DataSourceReader:
        return PopfleetReader(self.options, self._table())
