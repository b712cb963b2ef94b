"""Recovery: a lost or damaged flush checkpoint costs a full verification, never data.

The checkpoint says how far the commit log is fsynced and indexed. Without a
trustworthy one, recovery verifies and re-indexes the whole log: slower, still
exactly right, and still refusing damage in the middle of it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from popbroker.store.errors import CorruptStore
from tests.integration.store import faults


def _flip(path: Path) -> None:
    faults.flip_byte(path, 10)


def _shorten(path: Path) -> None:
    faults.cut_file(path, 10)


def _garbage(path: Path) -> None:
    path.write_bytes(b"\xff" * 32)


def _delete(path: Path) -> None:
    path.unlink()


DAMAGE: dict[str, Callable[[Path], None]] = {
    "flipped": _flip,
    "short": _shorten,
    "garbage": _garbage,
    "deleted": _delete,
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_checkpoint_verifies_the_whole_log_and_reads_correctly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    written = faults.populate(tmp_path, faults.settings(), count=200)
    assert len(faults.commitlog_segments(tmp_path)) >= 3
    DAMAGE[damage](tmp_path / "checkpoint")

    caplog.set_level(logging.INFO)
    store = faults.open_store(tmp_path, faults.settings())
    try:
        faults.assert_reads_exactly(store, written)
    finally:
        store.close_sync()
    assert f"commit log verified from 0 to {written[-1].end} (200 records" in caplog.text
    if damage != "deleted":
        assert "verifying the whole commit log" in caplog.text


def test_a_damaged_checkpoint_and_a_torn_tail_still_recover_exactly(tmp_path: Path) -> None:
    written = faults.populate(tmp_path, faults.settings(), count=200)
    _flip(tmp_path / "checkpoint")
    path, position = faults.locate(tmp_path, written[-1].physical_offset)
    faults.cut_file(path, position + written[-1].size - 3)

    store = faults.open_store(tmp_path, faults.settings())
    try:
        assert store.commitlog.end == written[-1].physical_offset
        faults.assert_reads_exactly(store, written[:-1])
    finally:
        store.close_sync()


def test_a_damaged_checkpoint_still_refuses_damage_early_in_the_log(tmp_path: Path) -> None:
    written = faults.populate(tmp_path, faults.settings(), count=200)
    _flip(tmp_path / "checkpoint")
    victim = written[2]
    faults.flip_record_byte(tmp_path, victim, "body")

    with pytest.raises(CorruptStore, match=f"physical offset {victim.physical_offset}"):
        faults.open_store(tmp_path, faults.settings())
