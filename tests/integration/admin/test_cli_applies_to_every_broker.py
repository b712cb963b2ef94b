"""``popfleet-admin`` as a subprocess against two live brokers (and one that is down)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from popbroker.admin.server import serve_admin
from popfleet_api.client import BrokerAdmin
from popfleet_api.models import ConsumeMode, Group, Member, Topic
from tests.integration.admin.conftest import Broker, FakeClock, open_store

CLI = Path(sys.executable).with_name("popfleet-admin")
TOKEN = "fleet-token"


@pytest.fixture
def down_target() -> Iterator[str]:
    """A loopback address that refuses connections: bound, never listening, held by the test."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{probe.getsockname()[1]}"


async def _cli(*args: str, token: str | None = None) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k != "POPFLEET_ADMIN_TOKEN"}
    if token is not None:
        env["POPFLEET_ADMIN_TOKEN"] = token
    process = await asyncio.create_subprocess_exec(
        str(CLI),
        "--timeout",
        "5",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.fixture
async def second_broker(tmp_path: Path) -> AsyncIterator[Broker]:
    clock = FakeClock()
    store = open_store(tmp_path / "data-b", broker_name="broker-b", clock=clock)
    server = await serve_admin(store, listen="127.0.0.1:0", clock=clock)
    try:
        yield Broker(store=store, server=server, clock=clock)
    finally:
        await server.stop(None)
        await store.close()


def _brokers(*targets: str) -> list[str]:
    return [arg for target in targets for arg in ("--broker", target)]


async def test_topic_create_tries_every_broker_and_reports_the_unreachable_one(
    broker: Broker, second_broker: Broker, down_target: str
) -> None:
    down = down_target
    code, out, err = await _cli(
        *_brokers(broker.target, down, second_broker.target),
        "topic",
        "create",
        "orders",
        "--queues",
        "4",
        "--perm",
        "rw",
    )
    assert code == 1, err
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["BROKER", "STATUS", "TOPIC"]
    assert any(line.startswith(broker.target) and " ok " in line for line in lines)
    assert any(line.startswith(second_broker.target) and " ok " in line for line in lines)
    [failed] = [line for line in lines if line.startswith(down)]
    assert "FAILED" in failed
    assert "UNAVAILABLE" in failed
    for live in (broker, second_broker):
        assert [t.name for t in await live.store.topics() if t.name == "orders"] == ["orders"]


async def test_groups_and_modes_on_two_brokers_as_json(
    broker: Broker, second_broker: Broker
) -> None:
    both = _brokers(broker.target, second_broker.target)
    for live in (broker, second_broker):
        async with live.client() as admin:
            await admin.put_topic(Topic("orders", 2, 2))

    code, out, err = await _cli(
        *both, "--output", "json", "group", "create", "billing", "--max-reconsume", "3", "--fifo"
    )
    assert code == 0, err
    document = json.loads(out)
    assert document["ok"]
    assert [b["broker"] for b in document["brokers"]] == [broker.target, second_broker.target]
    row = document["brokers"][0]["result"]["groups"][0]
    assert (row["group"], row["max_reconsume"], row["fifo"], row["created"]) == (
        "billing",
        3,
        True,
        True,
    )

    code, out, err = await _cli(
        *both,
        "--output",
        "json",
        "group",
        "set-mode",
        "billing",
        "--topic",
        "orders",
        "--mode",
        "pop",
        "--share",
        "1",
    )
    assert code == 0, err
    for live in (broker, second_broker):
        async with live.client() as admin:
            mode = await admin.consume_mode("billing", "orders")
            assert (mode.mode, mode.pop_share_queue_num) == (ConsumeMode.POP, 1)
            assert await admin.groups() == [Group("billing", 3, fifo=True)]

    code, out, err = await _cli(*both, "--output", "json", "group", "get-mode", "billing")
    assert code == 0, err
    modes = [b["result"]["modes"] for b in json.loads(out)["brokers"]]
    assert (
        modes
        == [[{"group": "billing", "topic": "orders", "mode": "POP", "share": 1, "explicit": True}]]
        * 2
    )


async def test_read_commands(broker: Broker) -> None:
    async with broker.client() as admin:
        await admin.put_topic(Topic("orders", 2, 2))
        await admin.put_group(Group("billing"))
        await admin.set_members([Member("broker-a", "10.1.1.1:8081")])
    await broker.store.commit_offset(group="billing", topic="orders", queue_id=1, queue_offset=0)
    target = _brokers(broker.target)

    code, out, err = await _cli(*target, "--output", "json", "offsets", "billing")
    assert code == 0, err
    rows = json.loads(out)["brokers"][0]["result"]["offsets"]
    assert [(r["topic"], r["queue"], r["committed"]) for r in rows] == [
        ("orders", 0, None),
        ("orders", 1, 0),
    ]

    code, out, err = await _cli(*target, "revive-stats")
    assert code == 0, err
    assert "# revive queues" in out
    assert "# retry and DLQ" in out
    assert "billing" in out

    code, out, err = await _cli(*target, "--output", "json", "info")
    assert code == 0, err
    info = json.loads(out)["brokers"][0]["result"]["info"][0]
    assert (info["broker_name"], info["client_endpoint"], info["ready"]) == (
        "broker-a",
        "10.1.1.1:8081",
        True,
    )

    code, out, err = await _cli(*target, "members", "set", "broker-a=h:1", "broker-b=h:2")
    assert code == 0, err
    code, out, err = await _cli(*target, "--output", "json", "members", "get")
    members = json.loads(out)["brokers"][0]["result"]["members"]
    assert members == [
        {"member": "broker-a", "endpoint": "h:1"},
        {"member": "broker-b", "endpoint": "h:2"},
    ]

    code, out, err = await _cli(*target, "topic", "list")
    assert code == 0, err
    assert "orders" in out
    assert "REVIVE_LOG" not in out


async def test_refusals_and_the_token(broker: Broker) -> None:
    server = await serve_admin(broker.store, listen="127.0.0.1:0", token=TOKEN)
    target = _brokers(f"127.0.0.1:{server.port}")
    try:
        code, out, _ = await _cli(*target, "topic", "create", "orders", "--queues", "4")
        assert code == 1
        assert "UNAUTHENTICATED" in out
        code, out, err = await _cli(
            *target, "topic", "create", "orders", "--queues", "4", token=TOKEN
        )
        assert code == 0, err
        code, out, _ = await _cli(
            *target, "topic", "create", "orders", "--queues", "2", token=TOKEN
        )
        assert code == 1
        assert "FAILED_PRECONDITION [QUEUE_SHRINK]" in out
        assert "has 4 read and 4 write queues" in out
        async with BrokerAdmin(f"127.0.0.1:{server.port}", token=TOKEN) as admin:
            assert [(t.name, t.read_queue_nums) for t in await admin.topics()] == [("orders", 4)]
    finally:
        await server.stop(None)


async def test_usage_errors_exit_2() -> None:
    assert CLI.exists(), "pip install -e ./api (make setup) installs popfleet-admin"
    code, _, err = await _cli("--broker", "127.0.0.1:1", "members", "set", "no-endpoint")
    assert code == 2
    assert "NAME=HOST:PORT" in err
    code, _, _ = await _cli("topic", "list")
    assert code == 2
