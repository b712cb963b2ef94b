"""Bounded polling: the only way the testbed and its tests wait for anything.

Why: sleeps that stand in for synchronisation make tests slow when generous and flaky when
not. ``until`` re-evaluates a condition at a short interval and fails with a message naming
what was awaited (and the last retriable error seen) when its deadline passes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from popfleet_testbed import errors

T = TypeVar("T")


def until(
    check: Callable[[], T | None],
    *,
    timeout_s: float,
    what: str,
    interval_s: float = 0.2,
    state: Callable[[], str] | None = None,
) -> T:
    """Call ``check`` until it returns something other than None/False; return that.

    Retriable ``TestbedError``s raised by ``check`` count as "not yet"; others propagate.
    ``state``, when given, describes what was seen instead; a timeout's message ends with it.
    """
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while True:
        try:
            result = check()
        except errors.TestbedError as exc:
            if not exc.retriable:
                raise
            last_error, result = exc, None
        except OSError as exc:  # connection refused while a server starts
            last_error, result = exc, None
        if result is not None and result is not False:
            return result
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            if state is not None:
                detail += f"\n{_described(state)}"
            raise errors.Timeout(f"timed out after {timeout_s:.0f}s waiting for {what}{detail}")
        time.sleep(interval_s)


def _described(state: Callable[[], str]) -> str:
    """``state()``, or why it could not be read (a timeout's message must not hide the timeout)."""
    try:
        return state()
    except (errors.TestbedError, OSError) as exc:
        return f"(state unavailable: {exc})"
