"""Group commit: concurrent SYNC appends share fsyncs, and each still waits for its own.

In ``FlushMode.SYNC`` an append returns only after an fsync covering its bytes.
Appends that arrive while the flusher is fsyncing are covered together by the next
fsync, so the number of fsyncs stays well below the number of appends when many
appenders run at once (``Flusher.flush_latencies_ms`` holds one entry per fsync).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from popbroker.store.api import FlushMode, TopicConfig
from popbroker.store.local import LocalStore
from tests.integration.store import _proc, faults

APPENDERS = 8
APPENDS_EACH = 150


@pytest.mark.timeout(60)
def test_concurrent_sync_appenders_share_fsyncs(tmp_path: Path) -> None:
    settings = faults.settings(flush_mode=FlushMode.SYNC)
    written: list[faults.Written] = []

    async def appender(store: LocalStore, queue_id: int) -> None:
        for queue_offset in range(APPENDS_EACH):
            message = _proc.message(1, queue_id, queue_offset)
            [result] = await store.append([message])
            # acknowledged means fsynced: the flusher has passed this record's end
            assert store.flusher.flushed_position >= result.physical_offset + result.size
            written.append(
                faults.Written(
                    faults.TOPIC,
                    queue_id,
                    result.queue_offset,
                    result.physical_offset,
                    result.size,
                    message.body,
                    _proc.tag_for(result.queue_offset),
                )
            )

    async def scenario() -> int:
        store = LocalStore.open(tmp_path, settings)
        try:
            await store.put_topic(TopicConfig(faults.TOPIC, APPENDERS, APPENDERS))
            fsyncs_before = len(store.flusher.flush_latencies_ms)
            await asyncio.gather(*(appender(store, q) for q in range(APPENDERS)))
            fsyncs = len(store.flusher.flush_latencies_ms) - fsyncs_before
            faults.assert_reads_exactly(store, written, queues=APPENDERS)
        finally:
            await store.close()
        return fsyncs

    fsyncs = asyncio.run(scenario())
    appends = APPENDERS * APPENDS_EACH
    assert len(written) == appends
    # typically ~4 appends per fsync here (the flusher starts on the first poke)
    assert 0 < fsyncs <= appends // 2, f"{fsyncs} fsyncs for {appends} appends"

    store = faults.open_store(tmp_path, settings)
    try:
        faults.assert_reads_exactly(store, written, queues=APPENDERS)
    finally:
        store.close_sync()
