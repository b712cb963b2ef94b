"""Audit runs as plain values: what was observed (:class:`Run`) and what to do (:class:`Plan`).

``status.audits`` reads Jobs and SparkApplications into runs; ``planning.auditschedule``
turns runs, the schedule and the clock into a plan; ``handlers.audits`` carries it out.
"""

from __future__ import annotations

import datetime
import enum
from dataclasses import dataclass


class RunState(enum.Enum):
    ACTIVE = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


@dataclass(frozen=True, slots=True)
class Run:
    """One audit run (Job or SparkApplication) as observed."""

    name: str
    scheduled_at: datetime.datetime
    state: RunState
    finished_at: datetime.datetime | None = None
    message: str = ""
    run_now: str = ""  # the run-now annotation value this run answered ("" for the schedule)


@dataclass(frozen=True, slots=True)
class Plan:
    """What to do this tick.

    ``start`` is the scheduled time of the run to create (None: create nothing);
    ``manual`` when that run answers the run-now annotation; ``waiting`` says why a due run
    does not start; ``prune`` names finished runs to delete; ``next_due`` is the next cron time.
    """

    start: datetime.datetime | None
    manual: bool
    scheduled: datetime.datetime | None  # the cron time this start consumes (None: manual only)
    waiting: str
    prune: tuple[str, ...]
    next_due: datetime.datetime
    active: str | None
