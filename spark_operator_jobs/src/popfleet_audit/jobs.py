"""Run the audits a command line asks for and write the run's summary and metrics.

Called by :func:`popfleet_audit.main.main` with a built session; returns the
:class:`~popfleet_audit.findings.AuditSummary` the status patches are made of.
"""

from __future__ import annotations

import logging
import time

from pyspark.sql import SparkSession

from popfleet_audit import backlog, findings, lag_audit, metrics, outputs, revive_backlog_audit
from popfleet_audit.config import AuditConfig
from popfleet_audit.findings import AuditSummary

REVIVE_READ_LOG = (  # the kind e2e quotes it (popfleet_e2e.auditing.REVIVE_RATE)
    "revive backlog audit read %d records of %d revive queues on %d broker(s) in %.1f s "
    "(%.0f records/s)"
)
log = logging.getLogger(__name__)


def run(spark: SparkSession, config: AuditConfig, *, token: str | None) -> AuditSummary:
    started = time.monotonic()
    audited_at_ms = int(time.time() * 1000)
    groups: dict[str, findings.GroupFindings] = {}
    partitions: tuple[dict[str, object], ...] = ()
    queues: tuple[dict[str, object], ...] = ()
    scanned = 0
    positions: dict[str, dict[str, int]] = {}
    jobs: list[str] = []
    if config.runs_lag:
        lag = lag_audit.run(spark, config)
        partition_rows = findings.plain_rows(lag.partitions.collect())
        groups = findings.merge_lag(groups, findings.plain_rows(lag.groups.collect()))
        partitions = tuple(sorted(partition_rows, key=_partition_order))
        jobs.append("lag")
        log.info("lag audit done after %.1f s", time.monotonic() - started)
    if config.runs_revive:
        revive_started = time.monotonic()
        inputs, revive = revive_backlog_audit.run(spark, config, token=token)
        groups = findings.merge_backlog(groups, findings.plain_rows(revive.totals.collect()))
        queues = findings.plain_rows(
            revive.queues.orderBy("broker_name", "revive_queue_id").collect()
        )
        scanned = backlog.records_read(revive.keys)
        positions = {"start": inputs.start_positions, "end": inputs.end_positions}
        jobs.append("revive")
        took = time.monotonic() - revive_started
        log.info(
            REVIVE_READ_LOG,
            scanned, len(inputs.end_positions), len(config.brokers), took, scanned / took,
        )  # fmt: skip
        log.info("revive backlog audit done after %.1f s", time.monotonic() - started)
    summary = AuditSummary(
        run_id=config.run_id,
        audited_at_ms=audited_at_ms,
        brokers=config.brokers,
        jobs=tuple(jobs),
        groups=groups,
        partitions=partitions,
        revive_queues=queues,
        revive_records_scanned=scanned,
        revive_positions=positions,
        duration_ms=int((time.monotonic() - started) * 1000),
    )
    outputs.write_summary(config.output_dir, summary.to_json())
    outputs.write_metrics(config.output_dir, metrics.render(summary))
    return summary


def _partition_order(row: dict[str, object]) -> tuple[str, str, str, int]:
    return (
        str(row["group"]),
        str(row["topic"]),
        str(row["broker_name"]),
        int(str(row["queue_id"])),
    )
