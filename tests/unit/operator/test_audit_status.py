"""Audit runs read from Jobs and SparkApplications; status.audit and AuditHealthy."""

from __future__ import annotations

import datetime
from typing import Any

from popfleet_operator.model import names
from popfleet_operator.model.auditruns import Plan, Run, RunState
from popfleet_operator.status import audits


def at(hour: int, minute: int, second: int = 0) -> datetime.datetime:
    return datetime.datetime(2026, 11, 21, hour, minute, second, tzinfo=datetime.UTC)


def run_body(name: str, status: dict[str, Any], *, run_now: str = "") -> dict[str, Any]:
    annotations = {names.AUDIT_SCHEDULED_AT: "2026-11-21T14:00:00Z"}
    if run_now:
        annotations[names.AUDIT_RUN_NOW] = run_now
    return {"metadata": {"name": name, "annotations": annotations}, "status": status}


def test_job_states() -> None:
    active = audits.run_from_job(run_body("a", {"active": 1}))
    assert active == Run("a", at(14, 0), RunState.ACTIVE)
    done = audits.run_from_job(
        run_body(
            "b",
            {
                "completionTime": "2026-11-21T14:02:00Z",
                "conditions": [
                    {"type": "SuccessCriteriaMet", "status": "True"},
                    {"type": "Complete", "status": "True"},
                ],
            },
            run_now="v1",
        )
    )
    assert done is not None and done.state is RunState.SUCCEEDED
    assert done.finished_at == at(14, 2) and done.run_now == "v1"
    failed = audits.run_from_job(
        run_body(
            "c",
            {
                "conditions": [
                    {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                     "lastTransitionTime": "2026-11-21T14:03:00Z"},
                ]
            },
        )
    )  # fmt: skip
    assert failed is not None and failed.state is RunState.FAILED
    assert failed.finished_at == at(14, 3) and "BackoffLimitExceeded" in failed.message
    assert audits.run_from_job({"metadata": {"name": "foreign"}, "status": {}}) is None


def test_spark_application_states() -> None:
    def state(value: str) -> RunState | None:
        body = run_body("s", {"applicationState": {"state": value}})
        found = audits.run_from_spark_application(body)
        return None if found is None else found.state

    assert state("") is RunState.ACTIVE
    assert state("RUNNING") is RunState.ACTIVE
    assert state("COMPLETED") is RunState.SUCCEEDED
    assert state("FAILED") is RunState.FAILED
    assert state("SUBMISSION_FAILED") is RunState.FAILED


def test_audit_healthy_follows_the_newest_finished_run() -> None:
    ok = Run("ok", at(13, 0), RunState.SUCCEEDED, at(13, 1))
    bad = Run("bad", at(14, 0), RunState.FAILED, at(14, 1), "Job BackoffLimitExceeded")
    running = Run("now", at(15, 0), RunState.ACTIVE)
    cond = audits.healthy([ok, bad, running], {})
    assert (cond.type, cond.status, cond.reason) == ("AuditHealthy", False, "AuditFailed")
    assert "BackoffLimitExceeded" in cond.message
    assert audits.healthy([bad, Run("ok2", at(14, 30), RunState.SUCCEEDED)], {}).status is True
    pending = audits.healthy([running], {})
    assert (pending.status, pending.reason) == (None, "AuditPending")
    remembered = audits.healthy([], {"lastRun": "gone", "lastRunState": "Failed"})
    assert (remembered.status, remembered.reason) == (False, "AuditFailed")


def test_status_records_a_started_run_and_keeps_history() -> None:
    plan = Plan(
        start=at(14, 15, 3),
        manual=True,
        scheduled=at(14, 15),
        waiting="",
        prune=(),
        next_due=at(14, 30),
        active=None,
    )
    previous = {"lastSuccessfulTime": "2026-11-21T13:01:00Z", "active": "", "stale": "x"}
    status = audits.audit_status(
        previous,
        runs=[Run("old", at(13, 0), RunState.SUCCEEDED, at(13, 1))],
        plan=plan,
        started="demo-audit-1763734503",
        backend="job",
        enabled_at="2026-11-21T12:00:00Z",
        run_now="v7",
    )
    assert status == {
        "enabledAt": "2026-11-21T12:00:00Z",
        "backend": "job",
        "nextScheduleTime": "2026-11-21T14:30:00Z",
        "waiting": "",
        "lastRun": "demo-audit-1763734503",
        "lastRunState": "Running",
        "active": "demo-audit-1763734503",
        "lastScheduleTime": "2026-11-21T14:15:00Z",
        "lastRunNow": "v7",
        "lastSuccessfulTime": "2026-11-21T13:01:00Z",
    }
    assert audits.disabled(status) == {
        "lastRun": "demo-audit-1763734503",
        "lastRunState": "Running",
        "lastScheduleTime": "2026-11-21T14:15:00Z",
        "lastRunNow": "v7",
        "lastSuccessfulTime": "2026-11-21T13:01:00Z",
    }


def test_a_run_carrying_the_run_now_value_records_it_when_its_start_went_unrecorded() -> None:
    """The tick that started the run lost its status write: a later tick, starting nothing,
    reads the value back from the run (and never from a run carrying another value)."""
    plan = Plan(None, False, None, "", (), at(14, 30), None)
    done = Run("r", at(14, 0), RunState.SUCCEEDED, at(14, 5), run_now="real-1")
    previous = {"lastRunNow": "spark-1", "lastRun": "r", "lastRunState": "Running"}

    def status(runs: list[Run], run_now: str) -> dict[str, Any]:
        return audits.audit_status(
            previous, runs=runs, plan=plan, started=None, backend="job",
            enabled_at="2026-11-21T12:00:00Z", run_now=run_now,
        )  # fmt: skip

    healed = status([done], "real-1")
    assert (healed["lastRunNow"], healed["lastRunState"]) == ("real-1", "Succeeded")
    assert status([done], "real-2")["lastRunNow"] == "spark-1"
    assert status([], "real-1")["lastRunNow"] == "spark-1"
