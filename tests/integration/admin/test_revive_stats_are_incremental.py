"""StorePopState advances its revive-log replay from where it stopped: GetReviveStats and the
in-flight counts cost the new records only, and say what one replay of the same records says."""

from __future__ import annotations

from pathlib import Path

import pytest

from popbroker.admin.server import serve_admin
from popbroker.inspect.popstate import StorePopState
from popbroker.pop import records
from popbroker.pop.checkpoints import QueueKey
from popfleet_api.client import BrokerAdmin
from popfleet_api.models import Group, Topic
from tests.integration.admin.conftest import REVIVE_QUEUES, Broker, FakeClock, open_store
from tests.integration.admin.revivelogs import append_record, checkpoint, set_revive_progress

KEY = QueueKey("orders", "billing", 0)
pytestmark = pytest.mark.timeout(60)


async def _write(broker: Broker, first: int, count: int) -> None:
    """``count`` CKs of two messages from offset ``first``, every other one half acked."""
    for start in range(first, first + 2 * count, 2):
        ck = checkpoint((start, start + 1), pop_time_ms=broker.clock.now_ms, revive_queue_id=0)
        await append_record(broker.store, ck, revive_queue_id=0)
        if start % 4 == 0:
            await append_record(broker.store, records.ack_for(ck.key, (start,)), revive_queue_id=0)


async def _answers(state: StorePopState) -> tuple[object, ...]:
    return (await state.in_flight([KEY]), dict(await state.revive_ledgers()))


async def test_a_second_call_reads_only_new_records(broker: Broker) -> None:
    state = StorePopState(broker.store, clock=broker.clock, cache_ms=0)
    await _write(broker, 0, 10)  # 10 CKs + 5 ACKs
    first = await _answers(state)
    assert state.records_read == 15
    assert await _answers(state) == first  # nothing new: nothing read
    assert state.records_read == 15
    await _write(broker, 20, 4)  # 4 CKs + 2 ACKs
    advanced = await _answers(state)
    assert state.records_read == 21
    replayed = StorePopState(broker.store, clock=broker.clock, cache_ms=0)
    assert await _answers(replayed) == advanced  # one replay of the same records
    assert advanced[0] == {KEY: 14 * 2 - 7}


async def test_a_moved_progress_or_a_reset_starts_the_replay_again(broker: Broker) -> None:
    state = StorePopState(broker.store, clock=broker.clock, cache_ms=0, max_scan_records=8)
    await _write(broker, 0, 4)  # 6 records
    await _answers(state)
    assert state.records_read == 6
    await _write(broker, 8, 4)  # 12 records: the budget window moved by 4, within the budget
    await _answers(state)
    assert state.records_read == 12
    await set_revive_progress(broker.store, 0, 11)  # 11 past the replay's start 0 > 8
    restarted = await _answers(state)
    assert state.records_read == 13  # a new replay of [11, 12)
    fresh = StorePopState(broker.store, clock=broker.clock, cache_ms=0, max_scan_records=8)
    assert await _answers(fresh) == restarted


async def test_revive_stats_called_twice_reads_the_log_once(tmp_path: Path) -> None:
    clock = FakeClock()
    store = open_store(tmp_path / "data", clock=clock)
    pop_state = StorePopState(store, clock=clock)
    server = await serve_admin(store, listen="127.0.0.1:0", clock=clock, pop_state=pop_state)
    try:
        async with BrokerAdmin(f"127.0.0.1:{server.port}", timeout_s=5.0) as admin:
            await admin.put_topic(Topic("orders", 1, 1))
            await admin.put_group(Group("billing"))
            await _write(Broker(store=store, server=server, clock=clock), 0, 6)
            first = await admin.revive_stats()
            assert pop_state.records_read == 9
            clock.now_ms += 10_000  # past the cache: the state is asked again
            second = await admin.revive_stats()
            assert pop_state.records_read == 9
            assert [q.ledger for q in second.queues] == [q.ledger for q in first.queues]
            assert len(second.queues) == REVIVE_QUEUES
            assert first.queues[0].ledger is not None
            assert first.queues[0].ledger.pending_checkpoints == 6
    finally:
        await server.stop(None)
        await store.close()
