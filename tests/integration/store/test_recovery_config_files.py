"""Recovery: lost or damaged config files fall back to their backup or to empty, loudly.

``config/metadata.json`` (topics, groups, modes, members, config epoch) is written
atomically with the previous version kept as ``.bak``. Whenever the store starts
from anything but the main file, it takes a **new config epoch**, so that the
operator notices and re-applies what is declared; the data in the commit log and
consume queues is never affected.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from popbroker.store.api import GroupConfig, StoreInfo
from popbroker.store.errors import CorruptStore
from popbroker.store.local import LocalStore
from tests.integration.store import faults


def _info(store: LocalStore) -> StoreInfo:
    return asyncio.run(store.info())


def _names(store: LocalStore) -> tuple[set[str], set[str]]:
    topics = asyncio.run(store.topics())
    groups = asyncio.run(store.groups())
    return {t.name for t in topics}, {g.name for g in groups}


def _written_with_two_config_versions(data_dir: Path) -> tuple[list[faults.Written], str]:
    """Data plus a config whose backup already holds the topic; returns the epoch."""
    written = faults.populate(data_dir, faults.settings(), count=100)
    store = faults.open_store(data_dir, faults.settings())
    try:
        asyncio.run(store.put_group(GroupConfig(name="billing")))
        epoch = _info(store).config_epoch
    finally:
        store.close_sync()
    return written, epoch


def _metadata(data_dir: Path, suffix: str = "") -> Path:
    return data_dir / "config" / f"metadata.json{suffix}"


def test_a_missing_config_file_is_restored_from_its_backup_with_a_new_epoch(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    written, epoch = _written_with_two_config_versions(tmp_path)
    assert _metadata(tmp_path, ".bak").exists()
    _metadata(tmp_path).unlink()

    store = faults.open_store(tmp_path, faults.settings())
    try:
        restored_epoch = _info(store).config_epoch
        assert restored_epoch != epoch
        topics, groups = _names(store)
        assert faults.TOPIC in topics
        assert "billing" not in groups  # the backup is one version behind
        faults.assert_reads_exactly(store, written)
    finally:
        store.close_sync()
    assert "config restored from its backup" in caplog.text

    # the restored config is the main file now: the next start keeps its epoch
    store = faults.open_store(tmp_path, faults.settings())
    try:
        assert _info(store).config_epoch == restored_epoch
    finally:
        store.close_sync()


@pytest.mark.parametrize("damage", [b"", b"{not json", b"\xff\xfe"])
def test_an_unreadable_config_file_is_restored_from_its_backup_with_a_new_epoch(
    tmp_path: Path, damage: bytes
) -> None:
    written, epoch = _written_with_two_config_versions(tmp_path)
    _metadata(tmp_path).write_bytes(damage)

    store = faults.open_store(tmp_path, faults.settings())
    try:
        assert _info(store).config_epoch != epoch
        assert faults.TOPIC in _names(store)[0]
        faults.assert_reads_exactly(store, written)
    finally:
        store.close_sync()


@pytest.mark.parametrize("content", [b'{"version": 99}', b"[1, 2]", b'{"version": 1}'])
def test_a_config_file_that_is_json_but_no_config_is_refused_and_kept(
    tmp_path: Path, content: bytes
) -> None:
    """It may be a newer format: never overwrite it with a backup or an empty config."""
    written, _epoch = _written_with_two_config_versions(tmp_path)
    _metadata(tmp_path).write_bytes(content)

    with pytest.raises(CorruptStore, match=r"metadata\.json: .*refusing to start"):
        faults.open_store(tmp_path, faults.settings())
    assert _metadata(tmp_path).read_bytes() == content

    _metadata(tmp_path).unlink()  # the operator moves it away: the backup is used
    store = faults.open_store(tmp_path, faults.settings())
    try:
        faults.assert_reads_exactly(store, written)
    finally:
        store.close_sync()


def test_config_and_backup_missing_open_empty_with_a_new_epoch_and_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    written, epoch = _written_with_two_config_versions(tmp_path)
    _metadata(tmp_path).unlink()
    _metadata(tmp_path, ".bak").unlink()

    caplog.set_level(logging.WARNING)
    store = faults.open_store(tmp_path, faults.settings())
    try:
        info = _info(store)
        assert info.config_epoch != epoch
        topics, groups = _names(store)
        assert faults.TOPIC not in topics
        assert groups == set()
        # the data is untouched: the operator re-applies the topic and finds it
        faults.assert_reads_exactly(store, written)
    finally:
        store.close_sync()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("config file missing" in r.getMessage() for r in warnings), caplog.text
    assert any(info.config_epoch in r.getMessage() for r in warnings)


def test_a_fresh_store_and_a_clean_restart_keep_one_epoch(tmp_path: Path) -> None:
    _written, epoch = _written_with_two_config_versions(tmp_path)
    store = faults.open_store(tmp_path, faults.settings())
    try:
        assert _info(store).config_epoch == epoch
    finally:
        store.close_sync()
