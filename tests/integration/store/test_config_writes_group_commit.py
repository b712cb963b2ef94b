"""Config writes are group-committed: concurrent changes share one rewrite of the file.

Every ``put_topic``/``put_group``/``put_consume_mode``/``delete_*`` rewrites and
fsyncs ``config/metadata.json`` before it returns (an answered change is durable);
concurrent changes share that rewrite instead of taking one each
(:mod:`popbroker.store.local`). Rewrites are counted through
``LocalStore.on_config_write`` (what ``popfleet_store_config_write_seconds`` counts).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from popbroker.store.api import ConsumeMode, ConsumeModeConfig, GroupConfig, TopicConfig
from popbroker.store.local import LocalStore
from tests.integration.store import faults

WRITERS = 60


def _on_disk(data_dir: Path) -> dict[str, set[str]]:
    raw = json.loads((data_dir / "config" / "metadata.json").read_bytes())
    return {
        "topics": {t["name"] for t in raw["topics"]},
        "groups": {g["name"] for g in raw["groups"]},
        "modes": {f"{m['group']}/{m['topic']}" for m in raw["modes"]},
    }


def _counting(store: LocalStore) -> list[float]:
    rewrites: list[float] = []
    store.on_config_write(rewrites.append)
    return rewrites


async def test_concurrent_changes_share_rewrites_and_each_is_on_disk_when_answered(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    store = faults.open_store(data_dir, faults.settings())
    rewrites = _counting(store)
    seen_on_answer: list[bool] = []

    async def one(index: int) -> None:
        kind = ("topics", "groups")[index % 2]
        name = f"obj-{index}"
        if kind == "topics":
            await store.put_topic(TopicConfig(name=name, read_queue_nums=2, write_queue_nums=2))
        else:
            await store.put_group(GroupConfig(name=name))
        seen_on_answer.append(name in _on_disk(data_dir)[kind])

    try:
        await asyncio.gather(*(one(i) for i in range(WRITERS)))
        assert seen_on_answer == [True] * WRITERS
        # all changes were made before the first rewrite finished: at most that one and
        # one more carrying everything else
        assert 1 <= len(rewrites) <= 2, rewrites
        on_disk = _on_disk(data_dir)
        names = {n for n in on_disk["topics"] | on_disk["groups"] if n.startswith("obj-")}
        assert names == {f"obj-{i}" for i in range(WRITERS)}
    finally:
        await store.close()


async def test_sequential_changes_each_rewrite_and_mixed_kinds_share(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    store = faults.open_store(data_dir, faults.settings())
    rewrites = _counting(store)
    try:
        for index in range(3):
            await store.put_topic(
                TopicConfig(name=f"t{index}", read_queue_nums=1, write_queue_nums=1)
            )
            await store.put_group(GroupConfig(name=f"g{index}"))
        assert len(rewrites) == 6  # nothing to share: one rewrite per answered change
        mode = ConsumeModeConfig(group="g0", topic="t0", mode=ConsumeMode.POP)
        await asyncio.gather(
            store.put_consume_mode(mode),
            store.delete_topic("t2"),
            store.delete_group("g2"),
            store.put_group(GroupConfig(name="g9")),
        )
        assert len(rewrites) in (7, 8)
        on_disk = _on_disk(data_dir)
        assert {**on_disk, "topics": {t for t in on_disk["topics"] if t.startswith("t")}} == {
            "topics": {"t0", "t1"},
            "groups": {"g0", "g1", "g9"},
            "modes": {"g0/t0"},
        }
    finally:
        await store.close()


async def test_reopening_keeps_the_changes_and_the_config_epoch(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    store = faults.open_store(data_dir, faults.settings())
    try:
        epoch = (await store.info()).config_epoch
        await asyncio.gather(
            *(store.put_group(GroupConfig(name=f"g{i}")) for i in range(10)),
        )
    finally:
        await store.close()
    again = faults.open_store(data_dir, faults.settings())
    try:
        assert (await again.info()).config_epoch == epoch  # the main file: same config
        assert [g.name for g in await again.groups()] == sorted(f"g{i}" for i in range(10))
    finally:
        await again.close()
