"""Failover of a broker set (issue 18): three replicas in this process,
their Lease on the testbed's kube-apiserver, replication over loopback. The leader takes
SYNC writes (minInSyncReplicas 2); it is killed (its tasks cancelled, its files left); once
the lease time has passed by the others' clocks one of them leads the next term and the
other follows it; every acknowledged write is on the new leader; the old leader, restarted,
follows, cuts what it had alone and becomes a byte-for-byte copy. Throughout, the pod of
the Lease's holder, and no other, carries the leader label."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

from kubernetes_asyncio import client

from popbroker.replicator.podlabels import LEADER_LABEL
from popbroker.replicator.replica import Replica
from popbroker.store.api import MessageToAppend
from popfleet_testbed import controlplane
from tests.integration.replication.reads import keys
from tests.integration.replication.test_follower_logs import _open, _segments

TOKEN = b"set-secret"
LEASE_MS, DEADLINE_MS, RETRY_MS, LAG_MS = 6_000, 4_000, 1_000, 3_000
ROUNDS = 60  # a bound on every loop of rounds below


SET_LABEL = "test.popfleet.io/set"  # the test's own label of the set's pods


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


async def _pods(pods: client.CoreV1Api, namespace: str) -> None:
    """Pods a, b, c of set broker-0, bound to a node that does not exist (never run)."""
    for name in "abc":
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {SET_LABEL: "broker-0"}},
            "spec": {
                "nodeName": "no-such-node",
                "automountServiceAccountToken": False,
                "containers": [{"name": "store", "image": "popfleet.local/none:0"}],
            },
        }
        await pods.create_namespaced_pod(namespace, cast(Any, body))


async def _labelled(pods: client.CoreV1Api, namespace: str) -> set[str]:
    found = await pods.list_namespaced_pod(
        namespace, label_selector=f"{SET_LABEL}=broker-0,{LEADER_LABEL}=true"
    )
    return {pod.metadata.name for pod in found.items}


async def _replica(
    name: str,
    tmp_path: Path,
    *,
    api: client.CoordinationV1Api,
    namespace: str,
    peers: dict[str, tuple[str, int]],
    clock: Clock,
    pods: client.CoreV1Api | None = None,
    synchronous: bool = True,
) -> Replica:
    """Replica ``name`` of set broker-0 on its store in ``tmp_path / name`` (minInSync 2)."""
    return Replica(
        await _open(tmp_path / name), name=name, api=api, namespace=namespace,
        lease_name="broker-0", peers=peers, token=TOKEN, clock_ms=clock,
        lease_ms=LEASE_MS, renew_deadline_ms=DEADLINE_MS, retry_ms=RETRY_MS,
        max_lag_ms=LAG_MS, min_in_sync=2, ack_timeout_s=10.0,
        pods=None if pods is None else (pods, f"{SET_LABEL}=broker-0"),
        synchronous=synchronous,
    )  # fmt: skip


async def _rounds_until(
    done: Callable[[], bool], step: Callable[[], Awaitable[None]], clock: Clock
) -> None:
    """``step`` (a round of every live replica) until ``done``, the shared clock one round on
    each time; at most ``ROUNDS``."""
    for _ in range(ROUNDS):
        await step()
        if done():
            return
        await asyncio.sleep(0.05)  # the followers' connections move between rounds
        clock.ms += RETRY_MS
    raise AssertionError("the set did not get there within its rounds")


def _message(i: int) -> list[MessageToAppend]:
    return [
        MessageToAppend(
            topic="orders", queue_id=i % 2, body=b"m%d" % i, properties={"UNIQ_KEY": str(i)}
        )
    ]


async def test_the_leader_dies_and_no_acknowledged_write_is_lost(
    api: client.CoordinationV1Api, pods: client.CoreV1Api, testbed_namespace: str, tmp_path: Path
) -> None:
    clock = Clock()
    peers = {name: ("127.0.0.1", controlplane.free_port()) for name in "abc"}
    await _pods(pods, testbed_namespace)

    async def replica(name: str) -> Replica:
        return await _replica(
            name, tmp_path, api=api, namespace=testbed_namespace, peers=peers, clock=clock,
            pods=pods,
        )  # fmt: skip

    replicas = {name: await replica(name) for name in "abc"}
    live = dict(replicas)

    async def step() -> None:
        for r in list(live.values()):  # one after another: the first to ask leads
            await r.round()

    async def rounds_until(done: Callable[[], bool]) -> None:
        await _rounds_until(done, step, clock)

    try:
        await rounds_until(
            lambda: (
                replicas["a"].appends is not None and replicas["a"].appends.in_sync == ["b", "c"]
            )
        )
        appends = replicas["a"].appends
        assert appends is not None
        assert await _labelled(pods, testbed_namespace) == {"a"}
        acknowledged = set()
        for i in range(40):
            await appends.append(_message(i))
            acknowledged.add(str(i))
        # a writes more that never gets acknowledged: the followers are cut off first
        for name in "bc":
            await replicas[name]._stop_following()
            live.pop(name)
        await replicas["a"].store.append(_message(1000))  # on a alone
        live.pop("a")
        await replicas["a"].stop(release=False)  # killed: its tasks end, its files stay
        await replicas["a"].store.close()
        live.update(b=replicas["b"], c=replicas["c"])

        await rounds_until(
            lambda: any(r.appends is not None and r.appends.in_sync for r in live.values())
        )
        new = next(r for r in live.values() if r.appends is not None)
        assert new.coordinator.me in "bc"
        assert new.leader is not None and new.leader.term == 2
        assert acknowledged <= await keys(new.store)  # nothing acknowledged is lost
        assert "1000" not in await keys(new.store)
        assert new.appends is not None
        await new.appends.append(_message(41))  # SYNC with the other follower
        # the dead leader's pod lost its label to the new leader's
        assert await _labelled(pods, testbed_namespace) == {new.name}

        restarted = await replica("a")
        replicas["a"] = live["a"] = restarted
        await rounds_until(lambda: restarted.store.commitlog.end == new.store.commitlog.end)
        assert _segments(restarted.store) == _segments(new.store)
        assert "1000" not in await keys(restarted.store)
        assert await _labelled(pods, testbed_namespace) == {new.name}
    finally:
        for r in replicas.values():
            await r.stop()
            await r.store.close()


async def test_a_stopping_leader_hands_over_without_the_lease_time(
    api: client.CoordinationV1Api, testbed_namespace: str, tmp_path: Path
) -> None:
    """A graceful stop (a rolling upgrade) releases the Lease after the leader stopped taking
    writes: a follower leads the next term at its next round, no lease time waited, holding
    every acknowledged write."""
    clock = Clock()
    peers = {name: ("127.0.0.1", controlplane.free_port()) for name in "ab"}
    replicas = {
        name: await _replica(
            name, tmp_path, api=api, namespace=testbed_namespace, peers=peers, clock=clock
        )
        for name in "ab"
    }
    a, b = replicas["a"], replicas["b"]
    try:
        for _ in range(ROUNDS):
            await a.round()
            await b.round()
            if a.appends is not None and a.appends.in_sync == ["b"]:
                break
            await asyncio.sleep(0.05)  # the follower's connection moves between rounds
            clock.ms += RETRY_MS
        assert a.appends is not None and a.appends.in_sync == ["b"]
        for i in range(10):
            await a.appends.append(_message(i))
        await a.stop()  # graceful: no more writes, then the Lease released
        standing = await b.round()  # the clock does not move: no lease time waited
        assert (standing.holder, standing.term, standing.serving) == ("b", 2, True)
        assert b.leader is not None and b.leader.term == 2
        assert {str(i) for i in range(10)} <= await keys(b.store)
    finally:
        for r in replicas.values():
            await r.stop()
            await r.store.close()
