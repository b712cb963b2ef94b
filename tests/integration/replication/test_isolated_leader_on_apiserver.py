"""A leader cut off from the API server (issue 18): a partition, not a crash.

Three replicas in this process, their Lease on the testbed's kube-apiserver; the leader's
only way to the API server is a TCP relay that can stop passing bytes while holding every
connection open, as a network partition that drops packets does (nothing is refused, the
client just waits). The leader keeps its followers, so SYNC writes could still be
acknowledged by them: what must stop it is its own clock. Then:

* before its renew deadline it still serves; once its last renewal is older than the
  deadline it refuses every write (``NotLeader``, counted as fenced) before any round
  notices, and its round, bounded by the deadline, makes it step down;
* after the lease time another replica leads the next term with every acknowledged write,
  and the third follows it; at no point do two replicas take writes, and every term has one
  holder;
* the partition heals: the old leader follows the new one, cuts nothing it acknowledged
  and becomes a byte-for-byte copy.

The clock the Lease rules read is injected; only the relay's cut is real time.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from kubernetes_asyncio import client, config

from popbroker.replicator.facade import ReplicatedStore
from popbroker.replicator.replica import Replica
from popbroker.store.errors import NotLeader
from popfleet_testbed import cluster, controlplane
from tests.integration.replication.reads import keys
from tests.integration.replication.test_failover_on_apiserver import (
    DEADLINE_MS,
    LAG_MS,
    LEASE_MS,
    RETRY_MS,
    TOKEN,
    Clock,
    _message,
    _rounds_until,
)
from tests.integration.replication.test_follower_logs import _open, _segments

ROUND_TIMEOUT_S = 0.5  # the cut-off leader's rounds give up this fast (real time)


class Partition:
    """A TCP relay to ``upstream`` on a free loopback port that passes bytes while open and
    holds them (every connection kept, nothing read on) while cut."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self._upstream = upstream
        self._open = asyncio.Event()
        self._open.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = controlplane.free_port()

    async def __aenter__(self) -> Partition:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def cut(self) -> None:
        self._open.clear()

    def heal(self) -> None:
        self._open.set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        pipes = [
            asyncio.create_task(self._pipe(reader, up_writer)),
            asyncio.create_task(self._pipe(up_reader, writer)),
        ]
        self._tasks.update(pipes)
        await asyncio.gather(*pipes, return_exceptions=True)
        self._tasks.difference_update(pipes)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self._open.wait()  # cut: the bytes wait here, the sender is not told
                writer.write(data)
                await writer.drain()
        finally:
            with contextlib.suppress(OSError):
                writer.close()


def _leading(replica: Replica) -> bool:
    return replica.leader is not None


def _serving(replica: Replica) -> bool:
    return replica.leads_now


@pytest.fixture
async def partitioned_api(
    testbed: cluster.Cluster,
) -> AsyncIterator[tuple[client.CoordinationV1Api, Partition]]:
    """(the Lease API through a :class:`Partition`, the partition)."""
    configuration = client.Configuration()
    await config.load_kube_config(
        config_file=str(testbed.kubeconfig), client_configuration=configuration
    )
    host, _, port = str(configuration.host).removeprefix("https://").rpartition(":")
    async with Partition((host, int(port))) as partition:
        configuration.host = f"https://{host}:{partition.port}"  # the certificate's IP still
        async with client.ApiClient(configuration) as api_client:
            yield client.CoordinationV1Api(api_client), partition


async def test_a_leader_cut_off_from_the_api_server_is_fenced_by_its_deadline(
    api: client.CoordinationV1Api,
    partitioned_api: tuple[client.CoordinationV1Api, Partition],
    testbed_namespace: str,
    tmp_path: Path,
) -> None:
    clock = Clock()
    cut_api, partition = partitioned_api
    peers = {name: ("127.0.0.1", controlplane.free_port()) for name in "abc"}

    async def replica(
        name: str, lease_api: client.CoordinationV1Api, round_timeout_s: float | None = None
    ) -> Replica:
        return Replica(
            await _open(tmp_path / name), name=name, api=lease_api,
            namespace=testbed_namespace, lease_name="broker-0", peers=peers, token=TOKEN,
            clock_ms=clock, lease_ms=LEASE_MS, renew_deadline_ms=DEADLINE_MS,
            retry_ms=RETRY_MS, max_lag_ms=LAG_MS, min_in_sync=2, ack_timeout_s=10.0,
            round_timeout_s=round_timeout_s,
        )  # fmt: skip

    a = await replica("a", cut_api, ROUND_TIMEOUT_S)  # the others: the renew deadline
    b, c = await replica("b", api), await replica("c", api)
    replicas = {"a": a, "b": b, "c": c}
    holders: dict[int, set[str]] = {}  # every term a round saw, with its holders

    async def rounds_until(done: Callable[[], bool], live: str = "abc") -> None:
        async def step() -> None:
            for name in live:  # one after another: the first to ask leads
                standing = await replicas[name].bounded_round()
                if standing is not None and standing.holder is not None:
                    holders.setdefault(standing.term, set()).add(standing.holder)
                serving = [r.name for r in replicas.values() if r.leads_now]
                assert len(serving) <= 1, f"two replicas take writes: {serving}"

        await _rounds_until(done, step, clock)

    try:
        await rounds_until(lambda: a.appends is not None and a.appends.in_sync == ["b", "c"])
        via_a = ReplicatedStore(a)
        acknowledged = set()
        for i in range(30):
            await via_a.append(_message(i))
            acknowledged.add(str(i))

        partition.cut()
        assert await a.bounded_round() is None  # its renewal hangs: the round gives up
        assert _serving(a)  # renewed within the deadline: it still serves
        await via_a.append(_message(30))  # and its followers acknowledge
        acknowledged.add("30")

        clock.ms += DEADLINE_MS + 1  # past the renew deadline, no round run yet
        fenced = a.fenced_writes
        with pytest.raises(NotLeader):
            await via_a.append(_message(1000))
        assert a.fenced_writes == fenced + 1
        assert _leading(a) and not _serving(a)
        assert await a.bounded_round() is None  # still cut: the round steps it down
        assert not _leading(a) and a.appends is None

        # the others lead the next term once the lease time has passed by their clocks
        await rounds_until(
            lambda: any(r.appends is not None and r.appends.in_sync for r in (b, c)), live="bc"
        )
        new = next(r for r in (b, c) if r.appends is not None)
        assert new.leader is not None and new.leader.term == 2
        assert acknowledged <= await keys(new.store)  # nothing acknowledged is lost
        assert "1000" not in await keys(new.store)
        await ReplicatedStore(new).append(_message(31))  # SYNC with the third replica
        acknowledged.add("31")

        partition.heal()
        await rounds_until(lambda: a.store.commitlog.end == new.store.commitlog.end)
        assert not _leading(a) and a.store.term() == 2
        assert _segments(a.store) == _segments(new.store)
        assert acknowledged <= await keys(a.store)
        assert holders == {1: {"a"}, 2: {new.name}}
    finally:
        partition.heal()
        for r in replicas.values():
            await r.stop()
            await r.store.close()
