"""The store role's command line and the dump tool, run as real processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from popbroker.store.api import PROPERTY_TAGS, FlushMode, MessageToAppend, TopicConfig
from popbroker.store.local import LocalStore
from tests.integration.store.remote_fixture import short_socket_dir, spawn_store
from tests.storesettings import small_settings

POPBROKER = [sys.executable, "-m", "popbroker.cli"]


async def _written_store(data_dir: Path, count: int = 30) -> None:
    store = LocalStore.open(data_dir, small_settings(flush_mode=FlushMode.SYNC))
    await store.put_topic(TopicConfig("t", 2, 2))
    await store.append(
        [
            MessageToAppend("t", i % 2, f"body-{i}".encode(), {PROPERTY_TAGS: "T"})
            for i in range(count)
        ]
    )
    await store.close()


def _damage_first_record(data_dir: Path) -> None:
    segment = data_dir / "commitlog" / ("0" * 20)
    raw = bytearray(segment.read_bytes())
    raw[60] ^= 0xFF  # inside the first record, far below the flush checkpoint
    segment.write_bytes(bytes(raw))


async def test_store_refuses_damaged_durable_data_and_says_where(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    await _written_store(data_dir)
    _damage_first_record(data_dir)
    socket_path = short_socket_dir() / "s.sock"
    done = subprocess.run(
        [*POPBROKER, "store", "--data-dir", str(data_dir), "--socket", str(socket_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "physical offset 0" in done.stderr
    assert "--repair" in done.stderr


async def test_store_with_repair_truncates_at_the_damage_and_serves(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    await _written_store(data_dir)
    _damage_first_record(data_dir)
    process = spawn_store(data_dir, extra_args=("--repair",))
    try:
        remote = await process.connect()
        bounds = await remote.bounds("t", 0)
        assert (bounds.min_queue_offset, bounds.max_queue_offset) == (0, 0)
        (written,) = await remote.append([MessageToAppend("t", 0, b"after repair")])
        assert written.queue_offset == 0
        await remote.close()
    finally:
        process.kill()


async def test_dump_prints_records_queues_and_damage(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    await _written_store(data_dir, count=4)
    dump = [sys.executable, "-m", "popbroker.store.dump"]
    summary = subprocess.run(
        [*dump, str(data_dir)], capture_output=True, text=True, timeout=60, check=True
    )
    assert "t/0: files=1 first=0 entries=2" in summary.stdout
    assert "t/1: files=1 first=0 entries=2" in summary.stdout
    records = subprocess.run(
        [*dump, str(data_dir), "--records"], capture_output=True, text=True, timeout=60, check=True
    )
    assert records.stdout.count("TAGS=T") == 4
    assert "t/1#1" in records.stdout and "body-3" in records.stdout
    queue_file = data_dir / "consumequeue" / "t" / "0" / ("0" * 20)
    entries = subprocess.run(
        [*dump, str(queue_file)], capture_output=True, text=True, timeout=60, check=True
    )
    assert "#0 physical=0" in entries.stdout and "#1 physical=" in entries.stdout
    _damage_first_record(data_dir)
    damaged = subprocess.run(
        [*dump, str(data_dir), "--records"], capture_output=True, text=True, timeout=60, check=False
    )
    assert damaged.returncode == 1
    assert "DAMAGED" in damaged.stdout
