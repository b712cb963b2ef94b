"""Audit runs as observed, the BrokerCluster's ``status.audit`` and its ``AuditHealthy``.

Runs are Jobs (``batch/v1``) or kubeflow SparkApplications (``v1beta2``); both are read into
:class:`~popfleet_operator.planning.auditschedule.Run` from their status:

* Job: condition ``Complete`` (or ``SuccessCriteriaMet``) True -> succeeded; ``Failed`` (or
  ``FailureTarget``) True -> failed; otherwise active. Finished at ``completionTime`` or the
  condition's ``lastTransitionTime``.
* SparkApplication: ``status.applicationState.state`` ``COMPLETED`` -> succeeded;
  ``FAILED``/``SUBMISSION_FAILED`` -> failed; anything else (none yet, SUBMITTED, RUNNING,
  PENDING_RERUN, ...) -> active. Finished at ``status.terminationTime``.

``AuditHealthy`` follows the newest finished run: True after a success, False after a
failure or when runs cannot be started at all (backend missing, invalid schedule), Unknown
before any run finished. Callers: ``handlers.audits``.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from popfleet_operator.model import names
from popfleet_operator.model.auditruns import Plan, Run, RunState
from popfleet_operator.status import conditions as c

AUDIT_HEALTHY = "AuditHealthy"

# Stable reasons.
AUDIT_SUCCEEDED = "AuditSucceeded"
AUDIT_FAILED = "AuditFailed"
AUDIT_PENDING = "AuditPending"
AUDIT_DISABLED = "AuditDisabled"
BACKEND_MISSING = "SparkOperatorMissing"

JOB_SUCCESS = ("Complete", "SuccessCriteriaMet")
JOB_FAILURE = ("Failed", "FailureTarget")
SPARK_SUCCESS = ("COMPLETED",)
SPARK_FAILURE = ("FAILED", "SUBMISSION_FAILED")


def timestamp(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: object) -> datetime.datetime | None:
    """An RFC 3339 UTC time as the apiserver writes it; None for absent or malformed."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)


def _scheduled_at(body: Mapping[str, Any]) -> datetime.datetime | None:
    annotations = body.get("metadata", {}).get("annotations") or {}
    return parse_time(annotations.get(names.AUDIT_SCHEDULED_AT))


def _run(
    body: Mapping[str, Any],
    scheduled: datetime.datetime,
    *,
    state: RunState,
    finished: datetime.datetime | None = None,
    message: str = "",
) -> Run:
    annotations = body.get("metadata", {}).get("annotations") or {}
    return Run(
        name=str(body["metadata"]["name"]),
        scheduled_at=scheduled,
        state=state,
        finished_at=finished,
        message=message,
        run_now=str(annotations.get(names.AUDIT_RUN_NOW, "")),
    )


def run_from_job(body: Mapping[str, Any]) -> Run | None:
    """A Job as an audit run (None: not one of ours, no scheduled-at annotation)."""
    scheduled = _scheduled_at(body)
    if scheduled is None:
        return None
    status = body.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("status") != "True":
            continue
        finished = parse_time(status.get("completionTime")) or parse_time(
            cond.get("lastTransitionTime")
        )
        message = str(cond.get("message") or cond.get("reason") or "")
        if cond.get("type") in JOB_SUCCESS:
            return _run(
                body, scheduled, state=RunState.SUCCEEDED, finished=finished, message=message
            )
        if cond.get("type") in JOB_FAILURE:
            return _run(body, scheduled, state=RunState.FAILED, finished=finished, message=message)
    return _run(body, scheduled, state=RunState.ACTIVE)


def run_from_spark_application(body: Mapping[str, Any]) -> Run | None:
    scheduled = _scheduled_at(body)
    if scheduled is None:
        return None
    status = body.get("status") or {}
    state = (status.get("applicationState") or {}).get("state", "")
    message = str((status.get("applicationState") or {}).get("errorMessage", ""))
    finished = parse_time(status.get("terminationTime"))
    if state in SPARK_SUCCESS:
        return _run(body, scheduled, state=RunState.SUCCEEDED, finished=finished, message=message)
    if state in SPARK_FAILURE:
        return _run(body, scheduled, state=RunState.FAILED, finished=finished, message=message)
    return _run(body, scheduled, state=RunState.ACTIVE)


def newest_finished(runs: Sequence[Run]) -> Run | None:
    finished = [r for r in runs if r.state is not RunState.ACTIVE]
    return max(finished, key=lambda r: (r.scheduled_at, r.name), default=None)


def healthy(runs: Sequence[Run], previous: Mapping[str, Any]) -> c.Condition:
    """``AuditHealthy`` from the newest finished run (or what status remembers of it)."""
    last = newest_finished(runs)
    if last is None and previous.get("lastRunState") in (
        RunState.SUCCEEDED.value,
        RunState.FAILED.value,
    ):
        ok = previous["lastRunState"] == RunState.SUCCEEDED.value
        return c.Condition(
            AUDIT_HEALTHY,
            ok,
            AUDIT_SUCCEEDED if ok else AUDIT_FAILED,
            f"run {previous.get('lastRun', '?')} {previous['lastRunState'].lower()}",
        )
    if last is None:
        return c.Condition(AUDIT_HEALTHY, None, AUDIT_PENDING, "no audit run has finished yet")
    if last.state is RunState.SUCCEEDED:
        return c.Condition(AUDIT_HEALTHY, True, AUDIT_SUCCEEDED, f"run {last.name} succeeded")
    detail = f": {last.message}" if last.message else ""
    return c.Condition(AUDIT_HEALTHY, False, AUDIT_FAILED, f"run {last.name} failed{detail}")


def audit_status(
    previous: Mapping[str, Any],
    *,
    runs: Sequence[Run],
    plan: Plan,
    started: str | None,
    backend: str,
    enabled_at: str,
    run_now: str,
) -> dict[str, Any]:
    """The new ``status.audit``: ``previous`` plus what this tick observed and did.

    ``started`` is the name of the run created this tick (None: none); ``run_now`` the
    annotation value honoured by it, recorded so that it starts exactly one run.
    """
    status = disabled(previous)
    status.update(enabledAt=enabled_at, backend=backend, nextScheduleTime=timestamp(plan.next_due))
    status["waiting"] = plan.waiting
    newest = max(runs, key=lambda r: (r.scheduled_at, r.name), default=None)
    if newest is not None:
        status["lastRun"], status["lastRunState"] = newest.name, newest.state.value
    successes = [r.finished_at for r in runs if r.state is RunState.SUCCEEDED and r.finished_at]
    previous_success = parse_time(previous.get("lastSuccessfulTime"))
    if previous_success is not None:
        successes.append(previous_success)
    latest_success = max(successes, default=None)
    if latest_success is not None:
        status["lastSuccessfulTime"] = timestamp(latest_success)
    status["active"] = plan.active or ""
    if started is not None:
        status.update(active=started, lastRun=started, lastRunState=RunState.ACTIVE.value)
        if plan.scheduled is not None:
            status["lastScheduleTime"] = timestamp(plan.scheduled)
    # A run-now value is answered once a run carries it: the one started now, or one a
    # tick started whose status write was lost (conflicts, or the operator stopped).
    started_manual = started is not None and plan.manual
    if run_now and (started_manual or any(r.run_now == run_now for r in runs)):
        status["lastRunNow"] = run_now
    return status


def disabled_condition() -> c.Condition:
    return c.Condition(AUDIT_HEALTHY, None, AUDIT_DISABLED, "spec.audit.enabled is false")


def disabled(previous: Mapping[str, Any]) -> dict[str, Any]:
    """``status.audit`` once audits are turned off: the history of runs, nothing scheduled."""
    kept = ("lastScheduleTime", "lastSuccessfulTime", "lastRun", "lastRunState", "lastRunNow")
    return {k: v for k, v in previous.items() if k in kept}
