"""The store role's ``/metrics`` counts admin calls and config-file rewrites.

The store role's companions (admin API and ``/metrics``, as ``popbroker store``
starts them) run on a real ``LocalStore``; the test makes admin calls that end
``OK``, ``NOT_FOUND`` and ``INVALID_ARGUMENT``, then scrapes:

  * ``popfleet_admin_requests_total{method,code}`` has exactly those calls;
  * ``popfleet_store_config_write_seconds_count`` counts one rewrite per answered
    config change made one at a time.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from popbroker.roles.store import Companion, _companions
from popbroker.store.local import LocalStore
from popfleet_api import errors
from popfleet_api.client import BrokerAdmin
from popfleet_api.models import Group, Topic
from tests.storesettings import small_settings

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def _scrape(port: int) -> Samples:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    raw = (await reader.read()).decode()
    writer.close()
    await writer.wait_closed()
    samples: Samples = {}
    for family in text_string_to_metric_families(raw.partition("\r\n\r\n")[2]):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def _calls(samples: Samples) -> dict[tuple[str, str], float]:
    return {
        (dict(labels)["method"], dict(labels)["code"]): count
        for (name, labels), count in samples.items()
        if name == "popfleet_admin_requests_total"
    }


async def test_admin_calls_and_config_rewrites_are_counted(tmp_path: Path) -> None:
    store = LocalStore.open(tmp_path / "data", small_settings())
    admin_port, metrics_port = tmp_path / "admin-port", tmp_path / "metrics-port"
    start = _companions(
        Companion("127.0.0.1:0", admin_port), None, Companion("127.0.0.1:0", metrics_port)
    )
    assert start is not None
    stop = await start(store, store)
    try:
        port = int(metrics_port.read_text())
        before = await _scrape(port)
        assert _calls(before) == {}
        rewrites_before = before[("popfleet_store_config_write_seconds_count", frozenset())]
        async with BrokerAdmin(f"127.0.0.1:{admin_port.read_text().strip()}") as admin:
            await admin.put_topic(Topic("orders", 2, 2))
            await admin.put_group(Group("billing"))
            await admin.topics(names=["orders"])
            await admin.topics(names=["orders"])
            with pytest.raises(errors.NotFound):
                await admin.delete_group("nobody")
            with pytest.raises(errors.InvalidArgument):
                await admin.put_topic(Topic("bad name", 1, 1))
            await admin.info()
        after = await _scrape(port)
        assert _calls(after) == {
            ("PutTopic", "OK"): 1,
            ("PutGroup", "OK"): 1,
            ("ListTopics", "OK"): 2,
            ("DeleteGroup", "NOT_FOUND"): 1,
            ("PutTopic", "INVALID_ARGUMENT"): 1,
            ("GetBrokerInfo", "OK"): 1,
        }
        rewrites = after[("popfleet_store_config_write_seconds_count", frozenset())]
        assert rewrites - rewrites_before == 2  # the two answered changes, one after the other
    finally:
        await stop()
        await store.close()
