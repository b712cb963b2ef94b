"""Audit schedule planning: due times, run-now, concurrency Forbid, history limits, backend."""

from __future__ import annotations

import datetime

import pytest

from popfleet_operator.errors import InvalidSpec
from popfleet_operator.model.auditruns import Run, RunState
from popfleet_operator.planning import auditschedule as schedule

EVERY_15 = "*/15 * * * *"


def at(hour: int, minute: int, second: int = 0) -> datetime.datetime:
    return datetime.datetime(2026, 11, 21, hour, minute, second, tzinfo=datetime.UTC)


def plan(
    *,
    now: datetime.datetime,
    since: datetime.datetime,
    runs: tuple[Run, ...] = (),
    run_now: bool = False,
    limits: tuple[int, int] = (3, 3),
) -> schedule.Plan:
    return schedule.plan(
        schedule=EVERY_15,
        now=now,
        since=since,
        runs=runs,
        run_now=run_now,
        successful_runs_limit=limits[0],
        failed_runs_limit=limits[1],
    )


def test_schedules_are_checked() -> None:
    assert schedule.check("*/5 * * * *") == "*/5 * * * *"
    assert schedule.check("@hourly") == "@hourly"
    for bad in ("*/5 * * *", "61 * * * *", "every minute", "* * * * * *"):
        with pytest.raises(InvalidSpec, match=r"spec\.audit\.schedule"):
            schedule.check(bad)


def test_latest_due_time_lies_after_since_and_not_after_now() -> None:
    assert schedule.latest_due(EVERY_15, since=at(14, 0), now=at(14, 14, 59)) is None
    assert schedule.latest_due(EVERY_15, since=at(14, 0), now=at(14, 15)) == at(14, 15)
    assert schedule.latest_due(EVERY_15, since=at(14, 15), now=at(14, 15)) is None
    # Missed times collapse into the latest one.
    assert schedule.latest_due(EVERY_15, since=at(13, 59), now=at(14, 50)) == at(14, 45)
    assert schedule.next_after(EVERY_15, at(14, 15)) == at(14, 30)


def test_nothing_due_nothing_starts() -> None:
    decided = plan(now=at(14, 7), since=at(14, 0))
    assert decided.start is None and decided.waiting == "" and decided.active is None
    assert decided.next_due == at(14, 15)


def test_a_due_time_starts_one_run_and_is_consumed() -> None:
    decided = plan(now=at(14, 16, 5), since=at(14, 0))
    assert (decided.start, decided.scheduled, decided.manual) == (at(14, 15), at(14, 15), False)
    assert decided.next_due == at(14, 30)


def test_concurrency_forbid_keeps_a_due_time_waiting() -> None:
    running = Run("demo-audit-1", at(14, 0), RunState.ACTIVE)
    decided = plan(now=at(14, 16), since=at(13, 50), runs=(running,))
    assert decided.start is None and decided.active == "demo-audit-1"
    assert "still active" in decided.waiting
    finished = Run("demo-audit-1", at(14, 0), RunState.SUCCEEDED, at(14, 17))
    later = plan(now=at(14, 18), since=at(13, 50), runs=(finished,))
    assert later.start == at(14, 15)


def test_an_existing_run_consumes_its_time_even_if_status_missed_it() -> None:
    existing = Run("demo-audit-x", at(14, 15), RunState.SUCCEEDED, at(14, 16))
    assert plan(now=at(14, 20), since=at(14, 0), runs=(existing,)).start is None


def test_run_now_starts_at_now_and_waits_for_an_active_run() -> None:
    decided = plan(now=at(14, 7, 30), since=at(14, 0), run_now=True)
    assert (decided.start, decided.manual, decided.scheduled) == (at(14, 7, 30), True, None)
    running = Run("demo-audit-1", at(14, 0), RunState.ACTIVE)
    blocked = plan(now=at(14, 7, 30), since=at(14, 0), runs=(running,), run_now=True)
    assert blocked.start is None and "concurrency Forbid" in blocked.waiting


def test_run_now_together_with_a_due_time_is_one_run_consuming_both() -> None:
    decided = plan(now=at(14, 15, 3), since=at(14, 0), run_now=True)
    assert (decided.start, decided.manual, decided.scheduled) == (at(14, 15, 3), True, at(14, 15))


def test_each_run_now_value_is_answered_once() -> None:
    answered = Run("demo-audit-9", at(14, 0), RunState.ACTIVE, run_now="v1")
    assert schedule.run_now_requested("v2", last_honoured="v1", runs=())
    assert not schedule.run_now_requested("v1", last_honoured="v1", runs=())
    assert not schedule.run_now_requested("v1", last_honoured="", runs=(answered,))
    assert not schedule.run_now_requested("", last_honoured="", runs=())


def test_history_limits_keep_the_newest_finished_runs_and_every_active_one() -> None:
    runs = (
        Run("ok-1", at(10, 0), RunState.SUCCEEDED, at(10, 1)),
        Run("ok-2", at(11, 0), RunState.SUCCEEDED, at(11, 1)),
        Run("ok-3", at(12, 0), RunState.SUCCEEDED, at(12, 1)),
        Run("bad-1", at(10, 30), RunState.FAILED, at(10, 31)),
        Run("bad-2", at(11, 30), RunState.FAILED, at(11, 31)),
        Run("now", at(13, 0), RunState.ACTIVE),
    )
    assert schedule.to_prune(runs, successful_runs_limit=2, failed_runs_limit=1) == (
        "ok-1",
        "bad-1",
    )
    assert schedule.to_prune(runs, successful_runs_limit=0, failed_runs_limit=0) == (
        "ok-1",
        "bad-1",
        "ok-2",
        "bad-2",
        "ok-3",
    )
    assert plan(now=at(13, 5), since=at(13, 0), runs=runs, limits=(3, 3)).prune == ()


def test_backend_auto_follows_the_spark_operator() -> None:
    assert schedule.backend("auto", spark_operator_installed=True) == "sparkapplication"
    assert schedule.backend("auto", spark_operator_installed=False) == "job"
    assert schedule.backend("job", spark_operator_installed=True) == "job"
    assert schedule.backend("sparkapplication", spark_operator_installed=True) == (
        "sparkapplication"
    )
    assert schedule.backend("sparkapplication", spark_operator_installed=False) is None
