"""The audit schedule: when a run is due, whether it may start, which old runs go.

Pure: the caller passes ``now`` and what it observed; nothing here reads a clock. Times are
timezone-aware UTC datetimes; cron schedules are evaluated in UTC (``croniter``).

One decision per audit tick (:func:`plan`), in this order:

1. ``due``: the latest cron time in ``(since, now]``, where ``since`` is the last scheduled
   time that was started (or, before the first run, when audits were enabled; or the newest
   existing run's time, whichever is latest). Several missed times collapse into one run, as
   a CronJob does; none is back-filled.
2. ``run-now``: a new value of the ``popfleet.io/audit-run-now`` annotation asks for a run at
   ``now`` (the value is recorded in status when honoured, so each value starts one run).
3. Concurrency ``Forbid``: while a run is active nothing starts; a due time stays due (it is
   not recorded as scheduled) and starts once the active run has finished.
4. History: finished runs beyond ``successful_runs_limit`` / ``failed_runs_limit`` are
   pruned, newest kept; active runs are never pruned.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from croniter import croniter

from popfleet_operator.errors import InvalidSpec
from popfleet_operator.model.auditruns import Plan, Run, RunState

UTC = datetime.UTC
__all__ = ["Plan", "Run", "RunState", "backend", "check", "plan", "run_now_requested"]


def check(schedule: str) -> str:
    """``schedule`` if croniter accepts it (five fields or @hourly/...), else ``InvalidSpec``."""
    if not croniter.is_valid(schedule) or len(schedule.split()) not in (1, 5):
        raise InvalidSpec(f"spec.audit.schedule: {schedule!r} is not a five-field cron schedule")
    return schedule


def next_after(schedule: str, moment: datetime.datetime) -> datetime.datetime:
    """The first cron time strictly after ``moment``."""
    return croniter(schedule, moment).get_next(datetime.datetime).astimezone(UTC)


def latest_due(
    schedule: str, *, since: datetime.datetime, now: datetime.datetime
) -> datetime.datetime | None:
    """The latest cron time in ``(since, now]``, or None when none fell in that interval."""
    if now <= since:
        return None
    latest = croniter(schedule, now + datetime.timedelta(seconds=1)).get_prev(datetime.datetime)
    latest = latest.astimezone(UTC)
    return latest if since < latest <= now else None


def to_prune(
    runs: Sequence[Run], *, successful_runs_limit: int, failed_runs_limit: int
) -> tuple[str, ...]:
    """Finished runs beyond the limits, oldest first; the newest of each kind are kept."""
    doomed: list[Run] = []
    for state, limit in (
        (RunState.SUCCEEDED, successful_runs_limit),
        (RunState.FAILED, failed_runs_limit),
    ):
        finished = sorted(
            (r for r in runs if r.state is state),
            key=lambda r: (r.finished_at or r.scheduled_at, r.scheduled_at, r.name),
            reverse=True,
        )
        doomed.extend(finished[limit:])
    return tuple(r.name for r in sorted(doomed, key=lambda r: (r.scheduled_at, r.name)))


def plan(
    *,
    schedule: str,
    now: datetime.datetime,
    since: datetime.datetime,
    runs: Sequence[Run],
    run_now: bool,
    successful_runs_limit: int,
    failed_runs_limit: int,
) -> Plan:
    """This tick's decision (steps 1-4 of the module docstring).

    A run that exists already consumed its time, even if recording it in status failed:
    ``since`` is moved past every observed run's scheduled time.
    """
    since = max([since, *(r.scheduled_at for r in runs)])
    due = latest_due(schedule, since=since, now=now)
    active = sorted((r for r in runs if r.state is RunState.ACTIVE), key=lambda r: r.scheduled_at)
    prune = to_prune(
        runs, successful_runs_limit=successful_runs_limit, failed_runs_limit=failed_runs_limit
    )
    next_due = next_after(schedule, now)
    wanted = due is not None or run_now
    if active:
        waiting = f"run {active[-1].name} still active (concurrency Forbid)" if wanted else ""
        return Plan(None, False, None, waiting, prune, next_due, active[-1].name)
    if not wanted:
        return Plan(None, False, None, "", prune, next_due, None)
    start = now if run_now else due
    return Plan(start, run_now, due, "", prune, next_due, None)


JOB = "job"
SPARK_APPLICATION = "sparkapplication"


def backend(requested: str, *, spark_operator_installed: bool) -> str | None:
    """The run kind for ``spec.audit.backend``: None when ``sparkapplication`` is asked for
    but the kubeflow SparkApplication CRD (v1beta2) is not installed."""
    if requested == JOB:
        return JOB
    if requested == SPARK_APPLICATION:
        return SPARK_APPLICATION if spark_operator_installed else None
    return SPARK_APPLICATION if spark_operator_installed else JOB


def run_now_requested(value: str, *, last_honoured: str, runs: Sequence[Run]) -> bool:
    """A run-now annotation value not yet answered (by status or by a run carrying it)."""
    return bool(value) and value != last_honoured and all(r.run_now != value for r in runs)
