"""A follower's connection to a leader cut off by policy ends with an ``OSError`` that is
not a ``ConnectionError`` (``EHOSTUNREACH``, a time-out): it ends the follow quietly (the
next round connects again) instead of leaving a task whose exception nobody retrieves,
which asyncio logs as an error (the kind isolation step's log check caught it)."""

from __future__ import annotations

import errno
from typing import Any, cast

import pytest

from popbroker.replicator.replica import Replica


class CutOff:
    def __init__(self, error: OSError) -> None:
        self.error = error

    async def run(self, host: str, port: int) -> None:
        raise self.error


@pytest.mark.parametrize(
    "error",
    [OSError(errno.EHOSTUNREACH, "No route to host"), TimeoutError(), ConnectionResetError()],
)
async def test_a_follow_ended_by_any_network_error_ends_quietly(error: OSError) -> None:
    replica: Any = Replica.__new__(Replica)  # only what _run_follower uses
    replica.name = "b"
    await Replica._run_follower(replica, cast(Any, CutOff(error)), "10.244.0.9", 9878)


async def test_a_follow_ended_by_a_bug_still_raises() -> None:
    replica: Any = Replica.__new__(Replica)
    replica.name = "b"
    with pytest.raises(ZeroDivisionError):
        await Replica._run_follower(replica, cast(Any, _Buggy()), "10.244.0.9", 9878)


class _Buggy:
    async def run(self, host: str, port: int) -> None:
        raise ZeroDivisionError
