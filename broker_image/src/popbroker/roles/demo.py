"""``popbroker demo``: the store-only demo (what ``make demo-store`` runs).

1. start a ``store`` role process on a scratch data directory, serving its Unix socket;
2. connect through the store wire API (as ``popack`` does), create a topic, append
   a few hundred tagged messages across its queues, read them back with a filter;
3. print what landed (``python -m popbroker.store.dump``);
4. keep the store running until Ctrl-C, then stop it by its PID.

It shows the durable store end to end. The whole fleet (operator, brokers,
clients on a local testbed) is ``make demo`` (``popfleet_e2e.demo``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from popbroker.store import dump
from popbroker.store.api import PROPERTY_TAGS, MessageToAppend, TopicConfig
from popbroker.store.wire.client import RemoteStore


async def _traffic(socket_path: Path) -> None:
    store = RemoteStore.connect(f"unix:{socket_path}")
    try:
        info = await store.wait_ready(timeout_s=20)
        print(
            f"store up: cluster={info.cluster} broker={info.broker_name} epoch={info.config_epoch}"
        )
        await store.put_topic(TopicConfig("demo-orders", read_queue_nums=4, write_queue_nums=4))
        batch = [
            MessageToAppend(
                "demo-orders",
                i % 4,
                f"order-{i}".encode(),
                {PROPERTY_TAGS: "paid" if i % 3 == 0 else "created"},
            )
            for i in range(400)
        ]
        results = await store.append(batch)
        print(f"appended {len(results)} messages to demo-orders (4 queues)")
        paid = await store.read("demo-orders", 0, 0, max_count=5, tag_filter="paid")
        print(f"queue 0, tag 'paid': {[m.body.decode() for m in paid.messages]} ...")
        for q in range(4):
            b = await store.bounds("demo-orders", q)
            print(f"  queue {q}: offsets [{b.min_queue_offset}, {b.max_queue_offset})")
    finally:
        await store.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="popbroker demo")
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    data_dir: Path = args.data_dir or Path(tempfile.mkdtemp(prefix="popfleet-demo-"))
    socket_path = data_dir.parent / f"{data_dir.name}.sock"
    command = [sys.executable, "-m", "popbroker.roles.store"]
    command += ["--data-dir", str(data_dir), "--socket", str(socket_path)]
    print(f"starting the store role: {' '.join(command)}")
    proc = subprocess.Popen(command)
    try:
        asyncio.run(_traffic(socket_path))
        print("\n--- python -m popbroker.store.dump", data_dir)
        dump.main([str(data_dir)])
        print(f"\nstore pid {proc.pid} keeps serving unix:{socket_path}; Ctrl-C to stop")
        proc.wait()
    except KeyboardInterrupt:
        print("\nstopping")
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
    return 0
