"""Crash: kill -9 during sustained SYNC appends loses no acknowledged append.

A writer subprocess (``_proc.py``) appends continuously over four queues in
``FlushMode.SYNC`` and prints an ack line after each append returns. The test
reads the acks as they come, SIGKILLs the writer at a seeded random point, reopens
the store in this process and checks every promise: each acknowledged append is
readable byte for byte at its queue offset, queues are dense and in order, and no
record differs from what the writer wrote. Three rounds on the same directory, so
later rounds recover a store that was itself recovered.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from popbroker.store.api import FlushMode
from tests.integration.store import faults

ROUNDS = 3
SEED = 3


def crash_rounds(tmp_path: Path, *, mode: FlushMode, rng: random.Random) -> list[faults.Ack]:
    """Run ``ROUNDS`` writer lives, each killed after a random number of acks."""
    data_dir = tmp_path / "data"
    all_acks: list[faults.Ack] = []
    lengths: dict[int, int] = {}
    for round_no in range(ROUNDS):
        stderr_path = tmp_path / f"writer-{round_no}.stderr"
        proc = faults.start_writer(
            data_dir,
            mode=mode,
            seed=SEED,
            max_messages=20_000,
            max_seconds=20,
            stderr_path=stderr_path,
        )
        reader = faults.AckReader(proc, stderr_path=stderr_path)
        try:
            reader.wait_for_acks(rng.randint(300, 1500), timeout_s=20)
        finally:
            faults.kill_hard(proc)
            reader.drain(timeout_s=10)  # acks printed before the kill count too
        assert proc.returncode == -9, "the writer must die by SIGKILL, not finish"
        all_acks.extend(reader.acks)
        lengths = faults.assert_acks_survived(
            data_dir, all_acks, seed=SEED, store_settings=faults.settings(flush_mode=mode)
        )
    assert sum(lengths.values()) >= len(all_acks)
    return all_acks


@pytest.mark.timeout(60)
def test_every_acknowledged_sync_append_survives_kill_9(tmp_path: Path) -> None:
    acks = crash_rounds(tmp_path, mode=FlushMode.SYNC, rng=random.Random(20261121))
    assert len(acks) >= ROUNDS * 300
