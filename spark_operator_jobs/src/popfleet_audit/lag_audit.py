"""``lag_audit``: lag per (broker, group, topic, queue) and its Burrow status, history kept.

extract -> transform -> load:

  1. extract: the ``offsets`` table of every broker (``popfleet`` data source,
     one partition per broker), read once and cached (one snapshot per run);
     the lag history so far;
  2. transform (pure): :func:`lagging.queue_lag`, this run's history rows, the
     Burrow evaluation over (history + this run) and the group statuses;
  3. load: ``lag/partitions`` and ``lag/groups`` reports, this run appended to
     the history table.

``popfleet-audit lag ...`` runs it alone (:mod:`.main`).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession

from popfleet_audit import burrow, lagging, outputs
from popfleet_audit.config import AuditConfig


@dataclass(frozen=True)
class LagResult:
    lags: DataFrame
    history_rows: DataFrame
    partitions: DataFrame
    groups: DataFrame  # burrow.group_status joined with lagging.group_lag


def extract(spark: SparkSession, config: AuditConfig) -> DataFrame:
    reader = spark.read.format("popfleet").option("table", "offsets")
    reader = reader.option("brokers", ",".join(config.brokers))
    if config.admin_token_file is not None:
        reader = reader.option("tokenFile", str(config.admin_token_file))
    return reader.load().cache()


def transform(offsets: DataFrame, history: DataFrame, *, run_id: str, window: int) -> LagResult:
    lags = lagging.queue_lag(offsets)
    rows = lagging.history_rows(lags, run_id=run_id)
    # Partitions gone from the brokers (deleted topics, groups) drop out of the report.
    partitions = burrow.evaluate(history.unionByName(rows), window=window).join(
        rows.select(*burrow.PARTITION), on=list(burrow.PARTITION), how="left_semi"
    )
    groups = burrow.group_status(partitions).join(
        lagging.group_lag(lags).drop("queues"), on="group", how="left"
    )
    return LagResult(lags=lags, history_rows=rows, partitions=partitions, groups=groups)


def load(result: LagResult, config: AuditConfig) -> None:
    outputs.write_report(result.partitions, config.output_dir, outputs.LAG_PARTITIONS)
    outputs.write_report(result.groups, config.output_dir, outputs.LAG_GROUPS)
    outputs.append_history(result.history_rows, config.history_dir, config.run_id)


def run(spark: SparkSession, config: AuditConfig) -> LagResult:
    offsets = extract(spark, config)
    history = outputs.read_history(spark, config.history_dir)
    result = transform(offsets, history, run_id=config.run_id, window=config.window_audits)
    # Evaluate before appending: the history read above must not see this run twice.
    result = LagResult(
        lags=result.lags.cache(),
        history_rows=result.history_rows.cache(),
        partitions=result.partitions.cache(),
        groups=result.groups.cache(),
    )
    load(result, config)
    return result
