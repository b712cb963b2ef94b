"""Crash: kill -9 of the store *server* process while clients append over the wire.

The store runs as ``python -m popbroker.roles.store`` in ``SYNC`` mode;
this test is the client (``RemoteStore`` over a Unix socket) with one appender per
queue. After a seeded random number of acknowledged appends the server is
SIGKILLed mid-stream; in-flight calls fail on the client. The directory is then
reopened in this process: every append the server acknowledged must be there,
byte for byte, in order and dense per queue, and every record present must be one
the client sent. Three rounds on the same directory, restarting the server each
time.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from popbroker.store.api import FlushMode, TopicConfig
from popbroker.store.errors import StoreError
from popbroker.store.wire.client import RemoteStore
from tests.integration.store import _proc, faults
from tests.integration.store.remote_fixture import StoreProcess, store_process_factory

ROUNDS = 3
SEED = 5


async def _append_until_killed(
    client: RemoteStore, process: StoreProcess, acks: list[faults.Ack], *, kill_after: int
) -> None:
    killed = asyncio.Event()

    async def appender(queue_id: int) -> None:
        rng = random.Random(f"{SEED}/{queue_id}/{len(acks)}")
        next_offset = (await client.bounds(faults.TOPIC, queue_id)).max_queue_offset
        while not killed.is_set():
            batch = [
                _proc.message(SEED, queue_id, next_offset + i) for i in range(rng.randint(1, 3))
            ]
            try:
                results = await client.append(batch)
            except StoreError:
                return  # the server is gone; this append may or may not have happened
            for message, result in zip(batch, results, strict=True):
                assert result.queue_offset == next_offset
                acks.append(
                    faults.Ack(faults.TOPIC, queue_id, next_offset, _proc.sha_of(message.body))
                )
                next_offset += 1
            if len(acks) >= kill_after and not killed.is_set():
                killed.set()
                process.kill()  # SIGKILL by PID, with other appends in flight

    await asyncio.wait_for(asyncio.gather(*(appender(q) for q in range(faults.QUEUES))), timeout=40)
    assert killed.is_set()


@pytest.mark.timeout(60)
async def test_acknowledged_appends_over_the_wire_survive_kill_9_of_the_store(
    tmp_path: Path,
) -> None:
    rng = random.Random(515)
    data_dir = tmp_path / "data"
    settings = faults.settings(flush_mode=FlushMode.SYNC)
    acks: list[faults.Ack] = []
    with store_process_factory(tmp_path) as spawn:
        process = spawn(data_dir, settings=settings)
        for round_no in range(ROUNDS):
            if round_no:
                process.start()
            client = await process.connect(timeout_s=2.0)
            try:
                await client.put_topic(TopicConfig(faults.TOPIC, faults.QUEUES, faults.QUEUES))
                kill_after = len(acks) + rng.randint(200, 800)
                await _append_until_killed(client, process, acks, kill_after=kill_after)
            finally:
                await client.close()
            faults.assert_acks_survived(data_dir, acks, seed=SEED, store_settings=settings)
    assert len(acks) >= ROUNDS * 200
