"""Consumer lag and the data volume on the store role's ``/metrics`` (issue 19).

The store role's companions run on a real ``LocalStore`` (as ``popbroker store`` starts
them); the test appends and commits offsets, then scrapes:

* ``popfleet_broker_consumer_lag_messages{group,topic}`` is the sum over the queues a group
  committed on of ``max - max(committed, min)``: queues without a commit and system topics
  are not lag; a deleted topic loses its series at the next scrape; a replica that does not
  lead exports none;
* the per-queue rule is the API's (``popfleet_api.models.QueueOffsets.lag_messages``, the
  audit's and the CLI's), for any offsets (property test);
* ``popfleet_broker_consumer_committed_offset{group,topic}`` sums the same queues' committed
  offsets and moves as the group commits;
* ``popfleet_store_volume_*`` are the data directory's filesystem.
"""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from popbroker.metrics.consumers import lag_by_group_topic, queue_lag
from popbroker.replication.figures import ReplicationFigures
from popbroker.roles.store import Companion, _companions
from popbroker.store.api import CommittedOffset, MessageToAppend, QueueBounds, TopicConfig
from popbroker.store.local import LocalStore
from popfleet_api.models import QueueOffsets
from tests.storesettings import small_settings
from tests.unit.metrics.test_admin_requests_and_config_writes import _scrape

LAG = "popfleet_broker_consumer_lag_messages"
COMMITTED = "popfleet_broker_consumer_committed_offset"


async def _append(store: LocalStore, topic: str, queue_id: int, count: int) -> None:
    await store.append(
        [MessageToAppend(topic=topic, queue_id=queue_id, body=b"m") for _ in range(count)]
    )


def _lags(
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float], metric: str = LAG
) -> dict[tuple[str, str], float]:
    return {
        (dict(labels)["group"], dict(labels)["topic"]): value
        for (name, labels), value in samples.items()
        if name == metric
    }


async def test_lag_is_summed_over_the_committed_queues_of_each_group(tmp_path: Path) -> None:
    store = LocalStore.open(tmp_path / "data", small_settings())
    port = tmp_path / "metrics-port"
    start = _companions(Companion(None, None), None, Companion("127.0.0.1:0", port))
    assert start is not None
    stop = await start(store, store)
    try:
        await store.put_topic(TopicConfig("orders", read_queue_nums=3, write_queue_nums=3))
        await store.put_topic(TopicConfig("audit", read_queue_nums=1, write_queue_nums=1))
        await _append(store, "orders", 0, 5)
        await _append(store, "orders", 1, 3)
        await _append(store, "orders", 2, 4)
        await _append(store, "audit", 0, 2)
        await store.commit_offset(group="billing", topic="orders", queue_id=0, queue_offset=2)
        await store.commit_offset(group="billing", topic="orders", queue_id=1, queue_offset=3)
        # queue 2: billing never committed there, so it is not lag (the one definition)
        await store.commit_offset(group="ledger", topic="orders", queue_id=2, queue_offset=9)
        await store.commit_offset(group="ledger", topic="audit", queue_id=0, queue_offset=0)
        await store.commit_offset(
            group="billing", topic="%RETRY%billing_orders", queue_id=0, queue_offset=0
        )
        samples = await _scrape(int(port.read_text()))
        assert _lags(samples) == {
            ("billing", "orders"): 3.0,  # 5 - 2 on queue 0, 3 - 3 on queue 1
            ("ledger", "orders"): 0.0,  # committed past the end: never negative
            ("ledger", "audit"): 2.0,
        }
        # the committed offsets over the same queues: what moves while a group consumes
        assert _lags(samples, COMMITTED) == {
            ("billing", "orders"): 5.0,
            ("ledger", "orders"): 9.0,
            ("ledger", "audit"): 0.0,
        }
        await store.commit_offset(group="billing", topic="orders", queue_id=0, queue_offset=4)
        moved = await _scrape(int(port.read_text()))
        assert _lags(moved, COMMITTED)[("billing", "orders")] == 7.0
        assert _lags(moved)[("billing", "orders")] == 1.0
        fs = os.statvfs(tmp_path)
        size = samples[("popfleet_store_volume_size_bytes", frozenset())]
        available = samples[("popfleet_store_volume_available_bytes", frozenset())]
        assert size == fs.f_blocks * fs.f_frsize
        assert 0 < available <= size

        await store.delete_topic("audit")
        after = await _scrape(int(port.read_text()))
        assert _lags(after) == {("billing", "orders"): 1.0, ("ledger", "orders"): 0.0}
        assert set(_lags(after, COMMITTED)) == {("billing", "orders"), ("ledger", "orders")}
    finally:
        await stop()
        await store.close()


async def test_a_replica_that_does_not_lead_exports_no_lag(tmp_path: Path) -> None:
    class Following:
        """A follower's store as the role serves it: the store, with its replica's figures."""

        def __init__(self, store: LocalStore) -> None:
            self._store = store

        def __getattr__(self, name: str) -> object:
            return getattr(self._store, name)

        def replication_figures(self) -> ReplicationFigures:
            return ReplicationFigures(term=2, leading=False, term_changes=0, fenced_writes=0)

    store = LocalStore.open(tmp_path / "data", small_settings())
    port = tmp_path / "metrics-port"
    start = _companions(Companion(None, None), None, Companion("127.0.0.1:0", port))
    assert start is not None
    await store.put_topic(TopicConfig("orders", read_queue_nums=1, write_queue_nums=1))
    await _append(store, "orders", 0, 4)
    await store.commit_offset(group="billing", topic="orders", queue_id=0, queue_offset=1)
    stop = await start(store, Following(store))  # type: ignore[arg-type]
    try:
        samples = await _scrape(int(port.read_text()))
        assert _lags(samples) == {}
        assert _lags(samples, COMMITTED) == {}
        assert ("popfleet_replication_leader", frozenset()) in samples
    finally:
        await stop()
        await store.close()


offsets = st.integers(min_value=0, max_value=10_000)


@given(low=offsets, high=offsets, committed=offsets)
def test_the_per_queue_rule_is_the_apis(low: int, high: int, committed: int) -> None:
    low, high = min(low, high), max(low, high)
    bounds = QueueBounds("orders", 0, low, high)
    api = QueueOffsets(
        topic="orders", queue_id=0, min_queue_offset=low, max_queue_offset=high,
        committed_queue_offset=committed, in_flight_messages=None,
        oldest_unconsumed_store_time_ms=None,
    )  # fmt: skip
    assert queue_lag(bounds, committed) == api.lag_messages
    rows = [CommittedOffset("g", "orders", 0, committed)]
    assert lag_by_group_topic(rows, {("orders", 0): bounds}) == {("g", "orders"): api.lag_messages}
