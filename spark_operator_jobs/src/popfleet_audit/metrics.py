"""Prometheus text exposition of an :class:`~popfleet_audit.findings.AuditSummary` (pure).

Written as ``metrics.prom`` beside the report, for a textfile collector or a
sidecar to serve. Gauges only; every sample of a run carries the same values
a ``kubectl get cg`` shows, so dashboards and status never disagree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from popfleet_audit.findings import AuditSummary

PREFIX = "popfleet_audit"
GROUP_STATUSES = ("OK", "WARN", "ERR")
PARTITION_STATUSES = ("OK", "WARN", "STALL", "STOP", "REWIND")

_GROUP_GAUGES = (
    ("lag_messages", "lag_messages", "Messages not yet committed past, summed over queues.", 1.0),
    ("time_lag_seconds", "time_lag_ms", "Age of the oldest unconsumed message.", 0.001),
    ("in_flight_messages", "in_flight_messages", "POP messages popped and not acked.", 1.0),
    ("revive_backlog_messages", "revive_backlog", "Un-acked messages of live checkpoints.", 1.0),
    ("overdue_checkpoints", "overdue_checkpoints", "Checkpoints past revive time + grace.", 1.0),
    ("retry_messages", "retry_messages", "Messages waiting in the group's retry topics.", 1.0),
    ("dlq_messages", "dlq_messages", "Messages in the group's DLQ topic.", 1.0),
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(labels: Mapping[str, object]) -> str:
    inner = ",".join(f'{key}="{_escape(str(value))}"' for key, value in labels.items())
    return "{" + inner + "}" if inner else ""


def _family(
    name: str, help_text: str, samples: Iterable[tuple[Mapping[str, object], float]]
) -> list[str]:
    lines = [f"# HELP {PREFIX}_{name} {help_text}", f"# TYPE {PREFIX}_{name} gauge"]
    lines += [f"{PREFIX}_{name}{_labels(labels)} {value:g}" for labels, value in samples]
    return lines


def render(summary: AuditSummary) -> str:
    groups = sorted(summary.groups.values(), key=lambda g: g.group)
    lines: list[str] = []
    for name, attr, help_text, scale in _GROUP_GAUGES:
        samples = [
            ({"group": g.group}, float(value) * scale)
            for g in groups
            if (value := getattr(g, attr)) is not None
        ]
        if samples:
            lines += _family(f"group_{name}", help_text, samples)
    status_samples = [
        ({"group": g.group, "status": status}, 1.0 if g.status == status else 0.0)
        for g in groups
        if g.status is not None
        for status in GROUP_STATUSES
    ]
    if status_samples:
        lines += _family("group_status", "1 for the group's Burrow status.", status_samples)
    partition_samples = [
        (
            {k: p[k] for k in ("broker_name", "group", "topic", "queue_id")} | {"status": s},
            1.0 if p["status"] == s else 0.0,
        )
        for p in summary.partitions
        for s in PARTITION_STATUSES
    ]
    if partition_samples:
        lines += _family("partition_status", "1 for the queue's Burrow status.", partition_samples)
        lines += _family(
            "partition_lag_messages",
            "Messages behind, per queue.",
            [
                (
                    {k: p[k] for k in ("broker_name", "group", "topic", "queue_id")},
                    p["lag_messages"],
                )
                for p in summary.partitions
            ],
        )
    for name, key, help_text, scale in (
        ("revive_lag_messages", "revive_lag_messages", "Revive-log records behind progress.", 1.0),
        ("revive_lag_seconds", "revive_lag_ms", "Age of the oldest unresolved record.", 0.001),
    ):
        samples = [
            (
                {"broker_name": q["broker_name"], "revive_queue": q["revive_queue_id"]},
                float(q[key]) * scale,
            )
            for q in summary.revive_queues
        ]
        if samples:
            lines += _family(name, help_text, samples)
    lines += _family(
        "revive_records_scanned", "Revive-log records read.", [({}, summary.revive_records_scanned)]
    )
    lines += _family(
        "last_run_timestamp_seconds", "When the audit ran.", [({}, summary.audited_at_ms / 1000)]
    )
    lines += _family(
        "duration_seconds", "How long the audit took.", [({}, summary.duration_ms / 1000)]
    )
    return "\n".join(lines) + "\n"
