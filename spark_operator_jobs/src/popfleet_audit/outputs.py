"""Every path an audit reads or writes: reports, the lag history, the summary, metrics.

Layout under ``--output`` (replaced by each run)::

    lag/partitions/      Parquet: Burrow status and lag per (broker, group, topic, queue)
    lag/groups/          Parquet: per group status, lag, time lag, in flight
    revive/groups/       Parquet: per (broker, group) backlog, overdue, ages, retry, DLQ
    revive/queues/       Parquet: per (broker, revive queue) progress, revive lag, backlog
    summary.json         the run in one document (what the status patches are built from)
    metrics.prom         Prometheus text format (node-exporter textfile collector style)

and under ``--history`` (kept across runs): ``lag/`` (Parquet, appended each run)
and ``revive_positions.json`` (where the last revive-log read ended).
Files are written to a temporary name and renamed, so a reader never sees half.

Everything here is written and read **by the driver** (the report tables and the history
are small: a row per group, queue or revive queue): a DataFrame is collected as Arrow and
written with pyarrow. Executors never write a file the run keeps, so with Spark's
Kubernetes backend the executor pods need no share of the data volume (an emptyDir or a
ReadWriteOnce claim on the driver is enough), and nothing is lost in an executor's local
directory.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from popfleet_audit import schemas

LAG_PARTITIONS = "lag/partitions"
LAG_GROUPS = "lag/groups"
REVIVE_GROUPS = "revive/groups"
REVIVE_QUEUES = "revive/queues"
SUMMARY = "summary.json"
METRICS = "metrics.prom"
HISTORY_LAG = "lag"
HISTORY_POSITIONS = "revive_positions.json"


def write_report(frame: DataFrame, output_dir: Path, name: str) -> None:
    """Replace the report table ``name`` with ``frame`` (one Parquet file, written whole)."""
    target = output_dir / name
    target.parent.mkdir(parents=True, exist_ok=True)
    staged = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir()
    pq.write_table(frame.toArrow(), staged / "part-00000.parquet")
    if target.exists():
        shutil.rmtree(target)
    os.replace(staged, target)


def append_history(frame: DataFrame, history_dir: Path, run_id: str) -> None:
    """Add this run's rows to the lag history (one Parquet file per run)."""
    path = history_dir / HISTORY_LAG
    path.mkdir(parents=True, exist_ok=True)
    staged = path / f".{run_id}.parquet.tmp"
    pq.write_table(frame.toArrow(), staged)
    os.replace(staged, path / f"{run_id}.parquet")


def read_history(spark: SparkSession, history_dir: Path) -> DataFrame:
    """The lag history so far (empty with the history schema on a first run)."""
    path = history_dir / HISTORY_LAG
    files = sorted(path.glob("*.parquet")) if path.is_dir() else []
    if not files:
        return spark.createDataFrame([], schemas.LAG_HISTORY)
    names = schemas.LAG_HISTORY.fieldNames()
    table = pq.read_table([str(f) for f in files], columns=names)
    return spark.createDataFrame(table, schema=schemas.LAG_HISTORY)


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_summary(output_dir: Path, summary: dict[str, Any]) -> Path:
    path = output_dir / SUMMARY
    _write_atomically(path, json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return path


def write_metrics(output_dir: Path, text: str) -> Path:
    path = output_dir / METRICS
    _write_atomically(path, text)
    return path


def write_positions(history_dir: Path, positions: dict[str, int]) -> None:
    _write_atomically(
        history_dir / HISTORY_POSITIONS, json.dumps(positions, indent=2, sort_keys=True) + "\n"
    )
