"""The /metrics endpoint's own behaviour, and the flush histogram fed by the store's flusher."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge

from popbroker.metrics import exposition
from popbroker.metrics.store import observe_flushes
from popbroker.store.api import FlushMode, MessageToAppend, TopicConfig
from popbroker.store.errors import StoreClosed
from popbroker.store.local import LocalStore
from tests.storesettings import small_settings


async def _get(port: int, path: str) -> tuple[str, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    raw = (await reader.read()).decode()
    writer.close()
    await writer.wait_closed()
    head, _, body = raw.partition("\r\n\r\n")
    return head.splitlines()[0], body


async def test_a_scrape_runs_the_refreshers_and_survives_a_broken_one() -> None:
    registry = CollectorRegistry()
    gauge = Gauge("demo_value", "demo", registry=registry)
    calls: list[int] = []

    async def refresh() -> None:
        calls.append(1)
        gauge.set(len(calls))

    async def broken() -> None:
        raise RuntimeError("store unreachable")

    server = await exposition.serve_metrics("127.0.0.1:0", registry, refreshers=[broken, refresh])
    try:
        status, body = await _get(server.port, "/metrics")
        assert status == "HTTP/1.1 200 OK"
        assert "demo_value 1.0" in body
        assert "popfleet_metrics_refresh_errors_total 1.0" in body
        _, body = await _get(server.port, "/metrics")
        assert "demo_value 2.0" in body
        status, _ = await _get(server.port, "/secrets")
        assert status == "HTTP/1.1 404 Not Found"
    finally:
        await server.stop()


async def test_a_source_that_is_unavailable_for_a_while_logs_once_not_every_scrape(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A store frozen or restarting under a 5 s scrape: one warning, one recovery line."""
    registry = CollectorRegistry()
    gauge = Gauge("demo_value", "demo", registry=registry)
    answers: list[float | None] = [None, None, 7.0, 8.0]  # None: the store does not answer

    async def refresh() -> None:
        answer = answers.pop(0)
        if answer is None:
            raise StoreClosed("store unreachable (DEADLINE_EXCEEDED)")
        gauge.set(answer)

    server = exposition.MetricsServer(registry, [refresh], Counter("e", "e", registry=registry))
    gauge.set(5.0)
    with caplog.at_level(logging.INFO, logger=exposition.__name__):
        bodies = [(await server.render()).decode() for _ in range(4)]
    assert ["demo_value 5.0" in b for b in bodies[:2]] == [True, True]  # last value kept
    assert "demo_value 8.0" in bodies[3]
    assert "e_total 2.0" in bodies[3]  # both failures counted
    levels = [(r.levelname, r.getMessage().split(": ", 1)[-1][:40]) for r in caplog.records]
    assert [lvl for lvl, _ in levels] == ["WARNING", "INFO"], levels
    assert not any(r.exc_info for r in caplog.records)


async def test_an_unexpected_refresher_error_is_logged_with_its_traceback_every_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = CollectorRegistry()

    async def broken() -> None:
        raise KeyError("a bug")

    server = exposition.MetricsServer(registry, [broken], Counter("e", "e", registry=registry))
    with caplog.at_level(logging.INFO, logger=exposition.__name__):
        await server.render()
        await server.render()
    assert [(r.levelname, bool(r.exc_info)) for r in caplog.records] == [("ERROR", True)] * 2


@pytest.mark.parametrize("listen", ["9100", "host:", ":9100", "host:99999", "host:port"])
def test_bad_listen_values_are_refused(listen: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        exposition.split_host_port(listen)


async def test_every_flush_is_observed_and_still_counted_in_the_flushers_list(
    tmp_path: Path,
) -> None:
    store = LocalStore.open(tmp_path, small_settings(flush_mode=FlushMode.SYNC))
    try:
        registry = CollectorRegistry()
        before = len(store.flusher.flush_latencies_ms)
        observe_flushes(store.flusher, registry)
        await store.put_topic(TopicConfig("t", read_queue_nums=1, write_queue_nums=1))
        await store.append([MessageToAppend("t", 0, b"one", {})])
        await store.append([MessageToAppend("t", 0, b"two", {})])
        latencies = store.flusher.flush_latencies_ms[before:]
        assert len(latencies) >= 2  # SYNC: each append waited for an fsync
        count = registry.get_sample_value("popfleet_store_flush_seconds_count")
        assert count == len(latencies)
        assert registry.get_sample_value("popfleet_store_flush_seconds_bucket", {"le": "+Inf"}) == (
            count
        )
        assert registry.get_sample_value("popfleet_store_flush_seconds_sum") == pytest.approx(
            sum(latencies) / 1000
        )
    finally:
        await store.close()
