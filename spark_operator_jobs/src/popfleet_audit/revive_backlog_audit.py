"""``revive_backlog_audit``: un-acked checkpoints per group from the revive log, revive lag.

extract -> transform -> load:

  1. extract: plan the revive-log read on the driver (one partition per
     (broker, revive queue), from the revive progress to the end at planning;
     the positions are recorded), then read ``revive_keys`` (the revive log with
     the CK/ACK matching done per revive queue where it is read, :mod:`.ckmatch`),
     ``revive_queues`` and ``group_retry`` through the ``popfleet`` data source,
     cached;
  2. transform (pure): :func:`backlog.checkpoint_states` (un-acked messages per CK),
     per-(broker, group) backlog with ages, retry and DLQ depths, per-group
     totals, per-revive-queue report;
  3. load: ``revive/groups`` and ``revive/queues`` reports, the end positions
     under ``--history``.

``popfleet-audit revive ...`` runs it alone (:mod:`.main`).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, DataFrameReader, SparkSession

from popfleet_audit import backlog, datasource, outputs
from popfleet_audit.config import AuditConfig


@dataclass(frozen=True)
class ReviveInputs:
    revive_keys: DataFrame  # the revive log matched per revive queue (ckmatch)
    revive_queues: DataFrame
    group_retry: DataFrame
    start_positions: dict[str, int]
    end_positions: dict[str, int]


@dataclass(frozen=True)
class ReviveResult:
    keys: DataFrame  # per CK key, orphan key and revive queue (backlog.checkpoint_keys)
    states: DataFrame  # per unresolved CK key (backlog.checkpoint_states)
    groups: DataFrame  # per (broker_name, group)
    totals: DataFrame  # per group
    queues: DataFrame  # per (broker_name, revive queue)


def _reader(spark: SparkSession, config: AuditConfig, table: str) -> DataFrameReader:
    reader = spark.read.format("popfleet").option("table", table)
    reader = reader.option("brokers", ",".join(config.brokers))
    if config.admin_token_file is not None:
        reader = reader.option("tokenFile", str(config.admin_token_file))
    return reader


def extract(spark: SparkSession, config: AuditConfig, *, token: str | None) -> ReviveInputs:
    plan = datasource.plan_revive_log(config.brokers, token=token)
    starts = {p.key: p.start_queue_offset for p in plan}
    ends = {p.key: p.end_queue_offset for p in plan}
    keys = (
        _reader(spark, config, "revive_keys")
        .option("startPositions", datasource.positions_json(plan, ends=False))
        .option("endPositions", datasource.positions_json(plan, ends=True))
        .load()
        .cache()
    )  # a row per CK key (the log matched where it is read), not per record
    return ReviveInputs(
        revive_keys=keys,
        revive_queues=_reader(spark, config, "revive_queues").load().cache(),
        group_retry=_reader(spark, config, "group_retry").load().cache(),
        start_positions=starts,
        end_positions=ends,
    )


def transform(
    revive_keys: DataFrame, revive_queues: DataFrame, group_retry: DataFrame, *, grace_ms: int
) -> ReviveResult:
    states = backlog.checkpoint_states(revive_keys, revive_queues, grace_ms=grace_ms)
    groups = backlog.group_backlog(states, group_retry, backlog.orphan_acks(revive_keys))
    return ReviveResult(
        keys=revive_keys,
        states=states,
        groups=groups,
        totals=backlog.group_totals(groups),
        queues=backlog.revive_queue_report(revive_queues, states),
    )


def load(result: ReviveResult, inputs: ReviveInputs, config: AuditConfig) -> None:
    outputs.write_report(result.groups, config.output_dir, outputs.REVIVE_GROUPS)
    outputs.write_report(result.queues, config.output_dir, outputs.REVIVE_QUEUES)
    outputs.write_positions(config.history_dir, inputs.end_positions)


def run(
    spark: SparkSession, config: AuditConfig, *, token: str | None
) -> tuple[ReviveInputs, ReviveResult]:
    inputs = extract(spark, config, token=token)
    result = transform(
        inputs.revive_keys,
        inputs.revive_queues,
        inputs.group_retry,
        grace_ms=config.overdue_grace_ms,
    )
    result = ReviveResult(
        keys=result.keys,
        states=result.states,
        groups=result.groups.cache(),
        totals=result.totals.cache(),
        queues=result.queues.cache(),
    )
    load(result, inputs, config)
    return inputs, result
