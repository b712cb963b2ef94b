"""The crash writer: a subprocess that appends until it is killed.

    python tests/integration/store/_proc.py --data-dir DIR --flush-mode sync --seed 1 ...

Opens a ``LocalStore`` on ``DIR`` (recovering whatever a previous, killed writer
left), creates the topic ``orders`` if needed, and runs one asyncio task per queue.
Each task appends batches of 1-3 messages to its queue, continuing from the
queue's current maximum, and prints one line per message **after** ``append``
returned::

    ACK <topic> <queue_id> <queue_offset> <sha256 of the body>

so every line on stdout is a promise the store made. Bodies are
``body_for(seed, queue_id, queue_offset)``, so the test can check every record it
finds, acknowledged or not. The writer stops by itself after ``--max-messages``
or ``--max-seconds`` (then it closes the store and prints ``DONE``); the crash
tests SIGKILL it long before that.

This file is run as a script and imported by ``faults`` for ``body_for``; it
imports nothing from the tests.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from popbroker.store.api import PROPERTY_TAGS, FlushMode, MessageToAppend, TopicConfig
from popbroker.store.local import LocalStore
from popbroker.store.settings import StoreSettings

TOPIC = "orders"
BORN_HOST = "10.0.0.1:4242"


def body_for(seed: int, queue_id: int, queue_offset: int) -> bytes:
    """The body written at ``queue_offset`` of ``queue_id``: 1..3000 bytes."""
    rng = random.Random(f"{seed}/{queue_id}/{queue_offset}")
    return rng.randbytes(rng.randint(1, 3000))


def tag_for(queue_offset: int) -> str:
    return "even" if queue_offset % 2 == 0 else "odd"


def sha_of(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def writer_settings(*, segment_bytes: int, **overrides: object) -> StoreSettings:
    """Small segments (several per test) and small consume-queue files."""
    values: dict[str, object] = {
        "segment_bytes": segment_bytes,
        "cq_entries_per_file": 16,
        "max_body_bytes": 16 * 1024,
        "max_properties_bytes": 4 * 1024,
        "flush_interval_ms": 20,
        "offsets_persist_interval_ms": 50,
    }
    values.update(overrides)
    return replace(StoreSettings(), **values)  # type: ignore[arg-type]


def message(seed: int, queue_id: int, queue_offset: int) -> MessageToAppend:
    return MessageToAppend(
        topic=TOPIC,
        queue_id=queue_id,
        body=body_for(seed, queue_id, queue_offset),
        properties={PROPERTY_TAGS: tag_for(queue_offset)},
        born_host=BORN_HOST,
    )


async def _append_forever(
    store: LocalStore,
    queue_id: int,
    *,
    seed: int,
    budget: list[int],
    deadline: float,
) -> None:
    rng = random.Random(f"batches/{seed}/{queue_id}")
    bounds = await store.bounds(TOPIC, queue_id)
    next_offset = bounds.max_queue_offset
    while budget[0] > 0 and time.monotonic() < deadline:
        count = min(rng.randint(1, 3), budget[0])
        budget[0] -= count
        batch = [message(seed, queue_id, next_offset + i) for i in range(count)]
        results = await store.append(batch)
        for sent, result in zip(batch, results, strict=True):
            if result.queue_offset != next_offset:
                raise SystemExit(f"queue {queue_id}: got offset {result.queue_offset}")
            print(f"ACK {TOPIC} {queue_id} {result.queue_offset} {sha_of(sent.body)}", flush=True)
            next_offset += 1


async def run(args: argparse.Namespace) -> None:
    store_settings = writer_settings(
        segment_bytes=args.segment_bytes, flush_mode=FlushMode(args.flush_mode)
    )
    store = LocalStore.open(args.data_dir, store_settings)
    try:
        topic = TopicConfig(name=TOPIC, read_queue_nums=args.queues, write_queue_nums=args.queues)
        await store.put_topic(topic)
        budget = [args.max_messages]
        deadline = time.monotonic() + args.max_seconds
        await asyncio.gather(
            *(
                _append_forever(store, q, seed=args.seed, budget=budget, deadline=deadline)
                for q in range(args.queues)
            )
        )
    finally:
        await store.close()
    print("DONE", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--flush-mode", choices=[m.value for m in FlushMode], required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--max-messages", type=int, default=20_000)
    parser.add_argument("--max-seconds", type=float, default=20.0)
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--segment-bytes", type=int, default=64 * 1024)
    asyncio.run(run(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
