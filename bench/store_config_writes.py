"""Store config writes: what one admin write costs at 1,000 topics + 1,000 groups.

Every config change (``put_topic``, ``put_group``, ``put_consume_mode``, ...)
rewrites and fsyncs the whole ``config/metadata.json`` before it is answered.
This measures, on a ``LocalStore`` holding ``--objects`` topics and as many
groups (in a temporary directory on the same filesystem as ``--dir``):

* ``sequential``  one ``put_group`` after another: one full rewrite each (what
  every write cost before group commit, concurrent or not);
* ``concurrent``  ``--burst`` ``put_group`` calls at once (``asyncio.gather``):
  they share rewrites (group commit); reported per write, with the rewrites
  counted through ``LocalStore.on_config_write``;
* ``file_bytes``  the size of the rewritten file.

Not part of ``make bench`` (a one-off for issue 15); prints JSON with the load
average. Run: ``python -m bench.store_config_writes [--objects 1000] [--burst 200]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

from bench.common import machine, median
from popbroker.store.api import GroupConfig, TopicConfig
from popbroker.store.local import LocalStore
from popbroker.store.settings import StoreSettings


async def measure(data_dir: Path, *, objects: int, burst: int) -> dict[str, object]:
    store = LocalStore.open(data_dir, StoreSettings())
    rewrites: list[float] = []
    store.on_config_write(rewrites.append)
    try:
        await asyncio.gather(
            *(store.put_topic(TopicConfig(f"topic-{i}", 8, 8)) for i in range(objects)),
            *(store.put_group(GroupConfig(f"group-{i}")) for i in range(objects)),
        )
        sequential_ms = []
        for i in range(burst // 4):
            started = time.perf_counter()
            await store.put_group(GroupConfig(f"group-{i}", max_reconsume_times=i % 100))
            sequential_ms.append((time.perf_counter() - started) * 1000)
        rewrites.clear()
        started = time.perf_counter()
        await asyncio.gather(
            *(store.put_group(GroupConfig(f"group-{i}", fifo=True)) for i in range(burst))
        )
        concurrent_total_ms = (time.perf_counter() - started) * 1000
        return {
            "objects": {"topics": objects, "groups": objects},
            "file_bytes": (data_dir / "config" / "metadata.json").stat().st_size,
            "sequential": {
                "writes": len(sequential_ms),
                "ms_per_write_median": round(median(sequential_ms), 2),
                "ms_per_write_max": round(max(sequential_ms), 2),
            },
            "concurrent": {
                "writes": burst,
                "rewrites": len(rewrites),
                "total_ms": round(concurrent_total_ms, 1),
                "ms_per_write": round(concurrent_total_ms / burst, 3),
                "rewrite_ms_median": round(median(rewrites), 2),
            },
        }
    finally:
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--burst", type=int, default=200)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args()
    load_before = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        result = asyncio.run(measure(Path(tmp) / "data", objects=args.objects, burst=args.burst))
    print(
        json.dumps({"load_average_before": load_before, **result, "machine": machine()}, indent=2)
    )


if __name__ == "__main__":
    main()
