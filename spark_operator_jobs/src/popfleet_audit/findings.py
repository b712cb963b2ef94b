"""What one audit run found, as plain values: the bridge from Spark rows to status and metrics.

:class:`AuditSummary` is built from collected report rows (dicts) by pure
functions; :mod:`popfleet_audit.publishing` turns it into status patches and
Events, :mod:`popfleet_audit.metrics` into Prometheus text, and
:meth:`AuditSummary.to_json` into ``summary.json``. A field is ``None`` when its
job did not run (``lag`` alone leaves the backlog unknown, and the reverse).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

Row = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class GroupFindings:
    group: str
    status: str | None = None  # OK, WARN, ERR (group status capped at ERR); None: lag not run
    lag_messages: int | None = None
    time_lag_ms: int | None = None
    in_flight_messages: int | None = None
    partitions_not_ok: int | None = None
    revive_backlog: int | None = None  # un-acked messages of unresolved checkpoints
    unacked_checkpoints: int | None = None
    overdue_checkpoints: int | None = None
    oldest_unacked_age_ms: int | None = None
    retry_messages: int | None = None
    dlq_messages: int | None = None


@dataclass(frozen=True, slots=True)
class AuditSummary:
    run_id: str
    audited_at_ms: int
    brokers: tuple[str, ...]
    jobs: tuple[str, ...]
    groups: dict[str, GroupFindings] = field(default_factory=dict)
    partitions: tuple[dict[str, Any], ...] = ()
    revive_queues: tuple[dict[str, Any], ...] = ()
    revive_records_scanned: int = 0
    revive_positions: dict[str, dict[str, int]] = field(default_factory=dict)
    duration_ms: int = 0

    @property
    def audited_at(self) -> str:
        return iso_time(self.audited_at_ms)

    def to_json(self) -> dict[str, Any]:
        document = asdict(self)
        document["audited_at"] = self.audited_at
        document["groups"] = {name: asdict(g) for name, g in sorted(self.groups.items())}
        return document


def iso_time(epoch_ms: int) -> str:
    moment = dt.datetime.fromtimestamp(epoch_ms / 1000, tz=dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_lag(groups: dict[str, GroupFindings], rows: Iterable[Row]) -> dict[str, GroupFindings]:
    """Add the lag job's per-group rows (burrow.group_status joined with lagging.group_lag)."""
    merged = dict(groups)
    for row in rows:
        name = row["group"]
        merged[name] = replace(
            merged.get(name, GroupFindings(name)),
            status=row["status"],
            partitions_not_ok=int(row["partitions_not_ok"]),
            lag_messages=int(row["lag_messages"] or 0),
            time_lag_ms=int(row["time_lag_ms"] or 0),
            in_flight_messages=int(row["in_flight_messages"] or 0),
        )
    return merged


def merge_backlog(
    groups: dict[str, GroupFindings], totals: Iterable[Row]
) -> dict[str, GroupFindings]:
    """Add the revive job's per-group totals (backlog.group_totals)."""
    merged = dict(groups)
    for row in totals:
        name = row["group"]
        merged[name] = replace(
            merged.get(name, GroupFindings(name)),
            revive_backlog=int(row["unacked_messages"]),
            unacked_checkpoints=int(row["unacked_checkpoints"]),
            overdue_checkpoints=int(row["overdue_checkpoints"]),
            oldest_unacked_age_ms=int(row["oldest_unacked_age_ms"]),
            retry_messages=int(row["retry_messages"]),
            dlq_messages=int(row["dlq_messages"]),
        )
    return merged


def plain_rows(rows: Sequence[Any]) -> tuple[dict[str, Any], ...]:
    """Spark Rows as JSON-ready dicts."""
    return tuple(row.asDict(recursive=True) for row in rows)
