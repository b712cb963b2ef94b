"""Crash: kill -9 during ASYNC appends; the store opens cleanly and loses nothing acked.

In ``FlushMode.ASYNC`` an append is acknowledged once it is in the page cache, and
a background flusher fsyncs every ``flush_interval_ms``. Killing the *process*
leaves the page cache to the kernel, so every acknowledged append must still be
there (asserted here). A *machine* crash (power loss, kernel panic) can lose the
appends of up to the last ``flush_interval_ms`` before it; that bound cannot be
exercised without pulling the power, and is the documented price of ASYNC.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from popbroker.store.api import FlushMode
from tests.integration.store.test_crash_sync_appends import ROUNDS, crash_rounds


@pytest.mark.timeout(60)
def test_every_acknowledged_async_append_survives_kill_9(tmp_path: Path) -> None:
    acks = crash_rounds(tmp_path, mode=FlushMode.ASYNC, rng=random.Random(4242))
    assert len(acks) >= ROUNDS * 300
