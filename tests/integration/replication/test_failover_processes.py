"""Failover of store role processes (issue 18): three ``popbroker store``
processes with ``--replica-name``, their Lease on the testbed's kube-apiserver, replication
over loopback TCP, writes through the store wire (SYNC, minInSyncReplicas 2). The leader
is killed with SIGKILL; another replica leads within the lease time and holds every
acknowledged write; followers refuse writes (``NotLeader``)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from popbroker.store.api import MessageToAppend, TopicConfig
from popbroker.store.errors import NotEnoughReplicas, NotLeader, StoreClosed
from popbroker.store.wire.client import RemoteStore
from popfleet_testbed import cluster
from tests.integration.replication.reads import keys

LEASE_MS, DEADLINE_MS, RETRY_MS, LAG_MS = 3_000, 2_000, 500, 1_500
WAIT_S = 60.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def replicas(
    testbed: cluster.Cluster, testbed_namespace: str, tmp_path: Path
) -> Iterator[dict[str, tuple[subprocess.Popen[bytes], Path]]]:
    token = tmp_path / "token"
    token.write_text("set-secret\n")
    peers = ",".join(f"{n}=127.0.0.1:{_free_port()}" for n in "abc")
    started: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
    for name in "abc":
        sock = tmp_path / f"{name}.sock"
        argv = [
            sys.executable, "-m", "popbroker.cli", "store",
            "--data-dir", str(tmp_path / name), "--socket", str(sock),
            "--replica-name", name, "--replica-peers", peers,
            "--lease-namespace", testbed_namespace, "--lease-name", "broker-0",
            "--replication-token-file", str(token), "--kubeconfig", str(testbed.kubeconfig),
            "--min-in-sync-replicas", "2", "--lease-ms", str(LEASE_MS),
            "--renew-deadline-ms", str(DEADLINE_MS), "--retry-ms", str(RETRY_MS),
            "--max-lag-ms", str(LAG_MS), "--ack-timeout-s", "5",
        ]  # fmt: skip
        log = (tmp_path / f"{name}.log").open("ab")
        started[name] = (subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT), sock)
        log.close()
    try:
        yield started
    finally:
        for proc, _ in started.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
        for proc, _ in started.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


def _message(i: int) -> list[MessageToAppend]:
    return [
        MessageToAppend(
            topic="orders", queue_id=i % 2, body=b"m%d" % i, properties={"UNIQ_KEY": str(i)}
        )
    ]


async def _leader_after(stores: dict[str, RemoteStore], message: int) -> tuple[str, float]:
    """Write ``message`` to whichever replica takes it (bounded); (its name, seconds)."""
    started = time.monotonic()
    while time.monotonic() - started < WAIT_S:
        for name, store in stores.items():
            try:
                await store.append(_message(message))
            except (NotLeader, NotEnoughReplicas, StoreClosed):
                continue
            return name, time.monotonic() - started
        await asyncio.sleep(0.1)  # bounded retry of a client, as the producers do
    raise AssertionError(f"no replica took a write within {WAIT_S}s")


async def test_a_killed_leader_loses_no_acknowledged_write(
    replicas: dict[str, tuple[subprocess.Popen[bytes], Path]],
) -> None:
    stores: dict[str, RemoteStore] = {}
    try:
        for name, (_, sock) in replicas.items():
            deadline = time.monotonic() + WAIT_S
            while not sock.exists():
                assert time.monotonic() < deadline, f"{name} never served"
                await asyncio.sleep(0.05)
            stores[name] = RemoteStore.connect(f"unix:{sock}")
            await stores[name].wait_ready(timeout_s=WAIT_S)
            await stores[name].put_topic(TopicConfig("orders", 2, 2))  # config: not replicated yet

        first, _ = await _leader_after(stores, 0)
        acknowledged = {"0"}
        for i in range(1, 60):
            await stores[first].append(_message(i))
            acknowledged.add(str(i))
        for name, store in stores.items():
            if name != first:
                with pytest.raises(NotLeader):
                    await store.append(_message(999))

        proc, _ = replicas[first]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        await stores.pop(first).close()
        second, failover_s = await _leader_after(stores, 100)
        acknowledged.add("100")
        print(f"failover: {first} killed, {second} took a SYNC write {failover_s:.2f}s later")
        assert second != first
        assert failover_s < 15  # the bound
        assert acknowledged <= await keys(stores[second])
    finally:
        for store in stores.values():
            await store.close()
