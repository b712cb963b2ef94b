"""The config crash writer: a subprocess that changes the config until it is killed.

    python tests/integration/store/_config_proc.py --data-dir DIR --writers 8

Opens a ``LocalStore`` on ``DIR`` (recovering what a previous, killed writer left),
prints ``EPOCH <config epoch>``, then runs ``--writers`` asyncio tasks; each puts
topics and groups named ``<kind>-<round>-<writer>-<n>`` and prints one line per
change **after** the store answered it::

    ACK <topic|group> <name>

so every ``ACK`` line is a promise the store made. The crash test SIGKILLs it; it
stops by itself after ``--max-seconds``. Imports nothing from the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from popbroker.store.api import GroupConfig, TopicConfig
from popbroker.store.local import LocalStore
from popbroker.store.settings import StoreSettings


async def _change_forever(store: LocalStore, *, prefix: str, deadline: float) -> None:
    index = 0
    while time.monotonic() < deadline:
        name = f"{prefix}-{index}"
        if index % 2 == 0:
            await store.put_topic(
                TopicConfig(name=f"t-{name}", read_queue_nums=2, write_queue_nums=2)
            )
            print(f"ACK topic t-{name}", flush=True)
        else:
            await store.put_group(GroupConfig(name=f"g-{name}"))
            print(f"ACK group g-{name}", flush=True)
        index += 1


async def run(args: argparse.Namespace) -> None:
    store = LocalStore.open(args.data_dir, StoreSettings())
    try:
        print(f"EPOCH {(await store.info()).config_epoch}", flush=True)
        deadline = time.monotonic() + args.max_seconds
        await asyncio.gather(
            *(
                _change_forever(store, prefix=f"{args.round}-{w}", deadline=deadline)
                for w in range(args.writers)
            )
        )
    finally:
        await store.close()
    print("DONE", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--round", type=int, default=0)
    parser.add_argument("--max-seconds", type=float, default=20.0)
    asyncio.run(run(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
