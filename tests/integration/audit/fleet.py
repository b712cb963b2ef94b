"""A broker as three role processes with the admin API on the store role, for the audits.

The revive role runs in its own process so a test can kill it (by PID) and get
a *stuck revive*: checkpoints past their revive time stay in the log, which is
what the backlog audit must report as overdue. Topics and groups are created
through the admin API. Readiness is polled, never slept for.
"""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

from popfleet_api import models
from popfleet_api.client import BrokerAdmin
from tests.integration.broker.harness import START_TIMEOUT_S, BrokerProcess, _store_ready, _wait_for


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _serving(target: str, deadline: float) -> None:
    while True:
        try:
            async with BrokerAdmin(target, timeout_s=2.0) as admin:
                if await admin.serving():
                    return
        except OSError:
            pass
        except Exception:
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise TimeoutError(f"admin API at {target} not serving")
        await asyncio.sleep(0.05)


def start_roles(work_dir: Path) -> tuple[BrokerProcess, str]:
    """store (+ admin API) + popack + revive; returns the broker and its admin endpoint."""
    work_dir.mkdir(parents=True, exist_ok=True)
    broker = BrokerProcess(mode="roles", work_dir=work_dir)
    socket_path = work_dir / "store.sock"
    port_file = work_dir / "port"
    admin_target = f"127.0.0.1:{_free_port()}"
    try:
        store = broker._spawn(
            "store",
            [
                "store",
                "--data-dir", str(broker.data_dir),
                "--socket", str(socket_path),
                "--admin-listen", admin_target,
            ],
        )  # fmt: skip
        asyncio.run(_store_ready(socket_path, store))
        asyncio.run(_serving(admin_target, time.monotonic() + START_TIMEOUT_S))
        broker._spawn(
            "popack",
            [
                "popack",
                "--store-socket", str(socket_path),
                "--data-dir", str(broker.data_dir),
                "--listen", "127.0.0.1:0",
                "--port-file", str(port_file),
            ],
        )  # fmt: skip
        broker._spawn(
            "revive",
            ["revive", "--store-socket", str(socket_path), "--data-dir", str(broker.data_dir)],
        )
        _wait_for(port_file.exists, what="endpoint", timeout_s=START_TIMEOUT_S, procs=broker.procs)
        broker.port = int(port_file.read_text().strip())
    except BaseException:
        broker.stop()
        raise
    return broker, admin_target


async def create(target: str, *, topic: str, queues: int, groups: tuple[str, ...]) -> None:
    async with BrokerAdmin(target) as admin:
        await admin.put_topic(models.Topic(topic, read_queue_nums=queues, write_queue_nums=queues))
        for group in groups:
            await admin.put_group(models.Group(group))
