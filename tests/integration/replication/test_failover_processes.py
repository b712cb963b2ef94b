"""Failover of store role processes (issue 18): three ``popbroker store``
processes with ``--replica-name``, their Lease on the testbed's kube-apiserver, replication
over loopback TCP, writes through the store wire (SYNC, minInSyncReplicas 2). The leader
is killed with SIGKILL; another replica leads within the lease time and holds every
acknowledged write and the config; followers refuse writes (``NotLeader``); every
replica's members name the set's leader's client endpoint, and only the leader keeps its
leader file (popfront's leader port follows it), before and after; the replicas' /metrics
tell the story (leader, term, in-sync set, term changes, fenced writes)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from popbroker.store.api import ClusterMember, MessageToAppend, TopicConfig
from popbroker.store.errors import NotEnoughReplicas, NotLeader, StoreClosed
from popbroker.store.wire.client import RemoteStore
from popfleet_testbed import cluster, controlplane
from tests.integration.replication.reads import keys

LEASE_MS, DEADLINE_MS, RETRY_MS, LAG_MS = 3_000, 2_000, 500, 1_500
WAIT_S = 60.0
# the client endpoint each replica advertises (data only: nothing dials it here)
ENDPOINTS = {name: f"127.0.0.{2 + i}:8081" for i, name in enumerate("abc")}


@pytest.fixture
def replicas(
    testbed: cluster.Cluster, testbed_namespace: str, tmp_path: Path
) -> Iterator[dict[str, tuple[subprocess.Popen[bytes], Path]]]:
    token = tmp_path / "token"
    token.write_text("set-secret\n")
    peers = ",".join(f"{n}=127.0.0.1:{controlplane.free_port()}" for n in "abc")
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
            "--cluster", "c1", "--broker-name", "broker-0",
            "--client-endpoint", ENDPOINTS[name],
            "--leader-file", str(tmp_path / f"{name}.leading"),
            "--metrics-listen", "127.0.0.1:0",
            "--metrics-port-file", str(tmp_path / f"{name}.metrics-port"),
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


async def _leader_after(
    stores: dict[str, RemoteStore], write: Callable[[RemoteStore], Awaitable[object]]
) -> tuple[str, float]:
    """``write`` to whichever replica takes it (bounded); (its name, seconds)."""
    started = time.monotonic()
    while time.monotonic() - started < WAIT_S:
        for name, store in stores.items():
            try:
                await write(store)
            except (NotLeader, NotEnoughReplicas, StoreClosed):
                continue
            return name, time.monotonic() - started
        await asyncio.sleep(0.1)  # bounded retry of a client, as the producers do
    raise AssertionError(f"no replica took a write within {WAIT_S}s")


async def _members_name(stores: dict[str, RemoteStore], endpoint: str) -> None:
    """Until every replica's members route broker-0 to ``endpoint`` (bounded)."""
    expected = [ClusterMember("broker-0", endpoint)]
    deadline = time.monotonic() + WAIT_S
    for name, store in stores.items():
        while (found := await store.members()) != expected:
            assert time.monotonic() < deadline, f"{name}'s members are {found}, not {expected}"
            await asyncio.sleep(0.1)  # bounded poll of a state the replica's rounds move


async def _leader_files(tmp_path: Path, live: set[str], leader: str) -> None:
    """Until, of the live replicas, only ``leader`` has a leader file, and it is being
    rewritten (bounded)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        files = {n for n in live if (tmp_path / f"{n}.leading").exists()}
        if files == {leader}:
            first = (tmp_path / f"{leader}.leading").stat().st_mtime_ns
            while (tmp_path / f"{leader}.leading").stat().st_mtime_ns == first:
                assert time.monotonic() < deadline, f"{leader}'s leader file is not rewritten"
                await asyncio.sleep(0.1)
            return
        assert time.monotonic() < deadline, f"leader files of {files}, not of {leader} alone"
        await asyncio.sleep(0.1)  # bounded poll of a state the replicas' rounds move


def _metrics(tmp_path: Path, name: str) -> dict[str, float]:
    """The replication samples on replica ``name``'s /metrics."""
    port = int((tmp_path / f"{name}.metrics-port").read_text())
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        lines = reply.read().decode().splitlines()
    return {
        sample: float(value)
        for sample, _, value in (line.rpartition(" ") for line in lines)
        if sample.startswith("popfleet_replication_")
    }


async def test_a_killed_leader_loses_no_acknowledged_write(
    replicas: dict[str, tuple[subprocess.Popen[bytes], Path]], tmp_path: Path
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

        # a config write is taken by the leader alone, and answered once its set holds it
        first, _ = await _leader_after(stores, lambda s: s.put_topic(TopicConfig("orders", 2, 2)))
        await stores[first].append(_message(0))
        acknowledged = {"0"}
        for i in range(1, 60):
            await stores[first].append(_message(i))
            acknowledged.add(str(i))
        for name, store in stores.items():
            if name != first:
                with pytest.raises(NotLeader):
                    await store.append(_message(999))
                with pytest.raises(NotLeader):
                    await store.put_topic(TopicConfig("refused", 1, 1))
        await _members_name(stores, ENDPOINTS[first])
        await _leader_files(tmp_path, set(stores), first)
        leading = _metrics(tmp_path, first)
        assert leading["popfleet_replication_leader"] == 1
        assert leading["popfleet_replication_in_sync_replicas"] == 3
        for name in set(stores) - {first}:
            following = _metrics(tmp_path, name)
            assert following["popfleet_replication_leader"] == 0
            assert following["popfleet_replication_fenced_writes_total"] >= 2  # refused above
            assert f'popfleet_replication_lag_bytes{{follower="{name}"}}' in leading

        proc, _ = replicas[first]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        await stores.pop(first).close()
        second, failover_s = await _leader_after(stores, lambda s: s.append(_message(100)))
        acknowledged.add("100")
        print(f"failover: {first} killed, {second} took a SYNC write {failover_s:.2f}s later")
        assert second != first
        assert failover_s < 15  # the bound
        assert acknowledged <= await keys(stores[second])
        assert {t.name for t in await stores[second].topics()} >= {"orders"}
        assert "refused" not in {t.name for t in await stores[second].topics()}
        await _members_name(stores, ENDPOINTS[second])
        await _leader_files(tmp_path, set(stores), second)
        after = _metrics(tmp_path, second)
        assert after["popfleet_replication_leader"] == 1
        assert after["popfleet_replication_term"] == leading["popfleet_replication_term"] + 1
        assert after["popfleet_replication_term_changes_total"] >= 1
    finally:
        for store in stores.values():
            await store.close()
