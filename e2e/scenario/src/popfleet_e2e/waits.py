"""Bounded polling: how every step of the scenario waits for the cluster.

Why: nothing in the scenario sleeps to let time pass; a step states the condition it needs and
a deadline, and fails with a message that names the condition and the last thing observed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from popfleet_e2e.access import ScenarioError

T = TypeVar("T")


class Timeout(ScenarioError):
    """A condition did not hold before its deadline."""


class Fatal(ScenarioError):
    """Raised by a check when waiting longer cannot help (e.g. the run failed): not retried."""


def until(
    check: Callable[[], T | None],
    *,
    timeout_s: float,
    what: str,
    interval_s: float = 0.5,
    seen: Callable[[], str] = lambda: "",
) -> T:
    """Call ``check`` until it returns something other than None/False; return that.

    ``ScenarioError`` and ``OSError`` from ``check`` count as "not yet" (a server starting, an
    object not created yet); the last one is quoted on timeout, with ``seen()``. ``Fatal``
    ends the wait at once.
    """
    deadline = time.monotonic() + timeout_s
    last_error = ""
    while True:
        try:
            result = check()
        except Fatal:
            raise
        except (ScenarioError, OSError) as exc:
            last_error, result = f"{type(exc).__name__}: {exc}", None
        if result is not None and result is not False:
            return result
        if time.monotonic() >= deadline:
            detail = "; ".join(s for s in (last_error, seen()) if s)
            raise Timeout(f"timed out after {timeout_s:.0f}s waiting for {what}: {detail}")
        time.sleep(interval_s)
