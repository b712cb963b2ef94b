"""Replication over a loopback TCP connection (issue 18): a follower
catches up from zero and then follows live appends; a restarted follower goes on from its
end; a wrong token or a stale leader is refused with nothing written; the leader's commit
offset is what every follower acknowledged."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from popbroker.replicator.wire import (
    Follower,
    Leader,
    ReplicationRefused,
    SyncAppends,
)
from popbroker.store.api import MessageToAppend
from popbroker.store.errors import NotEnoughReplicas
from popbroker.store.local import LocalStore
from tests.integration.replication.test_follower_logs import TOPICS, _open, _segments, _term
from tests.logtraffic import random_appends

TOKEN = b"set-secret"
WAIT_S = 30.0  # an upper bound on a wait for an observed state, never a sleep


async def _until(follower: Follower, running: asyncio.Task[None], done: Callable[[], bool]) -> None:
    """Wait (bounded) until ``done`` holds for the follower; its task ending first fails."""

    async def wait() -> None:
        async with follower.progress:
            await follower.progress.wait_for(done)

    waiting = asyncio.ensure_future(wait())
    finished, _ = await asyncio.wait(
        {waiting, running}, timeout=WAIT_S, return_when="FIRST_COMPLETED"
    )
    if waiting not in finished:
        waiting.cancel()
        if running in finished:
            running.result()  # its exception, if any
        raise AssertionError(f"follower at {follower.log.state}, condition not met")


async def test_a_follower_catches_up_from_zero_and_follows_live_appends(tmp_path: Path) -> None:
    leader_store, follower_store = await _open(tmp_path / "l"), await _open(tmp_path / "f")
    leader = Leader(leader_store, term=2, token=TOKEN, heartbeat_s=0.05)
    try:
        await _term(leader_store, 1, random.Random(1), 20)
        await _term(leader_store, 2, random.Random(2), 5)
        port = await leader.start("127.0.0.1", 0)
        follower = Follower(follower_store, name="f1", token=TOKEN)
        running = asyncio.create_task(follower.run("127.0.0.1", port))
        caught_up = lambda: follower.log.state.end == leader_store.commitlog.end  # noqa: E731
        await _until(follower, running, caught_up)
        await _appends(leader_store, random.Random(3), 15)  # live: the leader writes on
        await _until(follower, running, caught_up)
        assert _segments(follower_store) == _segments(leader_store)
        assert follower_store.epochs() == leader_store.epochs()
        await asyncio.wait_for(_acked(leader, "f1", leader_store.commitlog.end), WAIT_S)
        assert leader.commit_offset(["f1"]) == leader_store.commitlog.end
        assert leader.commit_offset(["f1", "never-connected"]) == 0
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    finally:
        await leader.stop()
        await leader_store.close()
        await follower_store.close()


async def _appends(store: LocalStore, rng: random.Random, batches: int) -> None:
    """More appends in the leader's current term."""
    await random_appends(store, rng, batches, label="live", topics=TOPICS)


async def _acked(leader: Leader, name: str, end: int) -> None:
    async with leader.ack_progress:
        await leader.ack_progress.wait_for(lambda: leader.acked.get(name) == end)


async def test_a_restarted_follower_goes_on_from_its_end(tmp_path: Path) -> None:
    leader_store = await _open(tmp_path / "l")
    leader = Leader(leader_store, term=1, token=TOKEN, heartbeat_s=0.05)
    try:
        await _term(leader_store, 1, random.Random(3), 30)
        port = await leader.start("127.0.0.1", 0)
        follower_store = await _open(tmp_path / "f")
        follower = Follower(follower_store, name="f1", token=TOKEN)
        running = asyncio.create_task(follower.run("127.0.0.1", port))
        await _until(follower, running, lambda: follower.log.state.end > 0)
        running.cancel()  # the follower goes mid-stream
        await asyncio.gather(running, return_exceptions=True)
        await follower_store.close()
        follower_store = await _open(tmp_path / "f")
        follower = Follower(follower_store, name="f1", token=TOKEN)
        assert follower.log.state.end > 0
        running = asyncio.create_task(follower.run("127.0.0.1", port))
        await _until(
            follower, running, lambda: follower.log.state.end == leader_store.commitlog.end
        )
        assert _segments(follower_store) == _segments(leader_store)
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await follower_store.close()
    finally:
        await leader.stop()
        await leader_store.close()


@pytest.mark.parametrize("case", ["wrong token", "stale leader"])
async def test_refusals_write_nothing(tmp_path: Path, case: str) -> None:
    leader_store, follower_store = await _open(tmp_path / "l"), await _open(tmp_path / "f")
    deposed: list[int] = []
    leader = Leader(leader_store, term=3, token=TOKEN, heartbeat_s=0.05)
    leader.on_deposed = deposed.append
    try:
        await _term(leader_store, 3, random.Random(4), 5)
        port = await leader.start("127.0.0.1", 0)
        if case == "stale leader":  # this replica followed term 5 before it restarted
            await _term(follower_store, 5, random.Random(5), 1)
            follower_store.record_term(5)
            await follower_store.close()
            follower_store = await _open(tmp_path / "f")
        follower = Follower(
            follower_store, name="f1", token=b"wrong" if case == "wrong token" else TOKEN
        )
        before = _segments(follower_store)
        with pytest.raises(ReplicationRefused):
            await asyncio.wait_for(follower.run("127.0.0.1", port), WAIT_S)
        assert _segments(follower_store) == before
        assert deposed == ([5] if case == "stale leader" else [])
    finally:
        await leader.stop()
        await leader_store.close()
        await follower_store.close()


def _message(i: int) -> MessageToAppend:
    return MessageToAppend(topic="orders", queue_id=0, body=b"m%d" % i, properties={})


async def test_a_sync_append_is_answered_once_the_in_sync_follower_holds_it(
    tmp_path: Path,
) -> None:
    async with _term_one(tmp_path) as (leader_store, follower_store, leader, port):
        follower = Follower(follower_store, name="f1", token=TOKEN)
        running = asyncio.create_task(follower.run("127.0.0.1", port))
        appends = SyncAppends(leader_store, leader, min_in_sync=2, timeout_s=WAIT_S)
        appends.in_sync = ["f1"]
        for i in range(20):
            (result,) = await appends.append([_message(i)])
            # answered: the follower has it, durably (its store is SYNC)
            assert follower_store.commitlog.end >= result.physical_offset + result.size
            assert (await follower_store.info()).flushed_physical_offset >= result.physical_offset
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)

        # the follower gone, still in the set: the write is not acknowledged in time
        slow = SyncAppends(leader_store, leader, min_in_sync=2, timeout_s=0.3)
        slow.in_sync = ["f1"]
        with pytest.raises(NotEnoughReplicas, match="did not acknowledge"):
            await slow.append([_message(99)])
        # the set shrunk below its minimum: refused before anything is appended
        end = leader_store.commitlog.end
        slow.in_sync = []
        with pytest.raises(NotEnoughReplicas, match="1 in-sync replicas, 2 needed"):
            await slow.append([_message(100)])
        assert leader_store.commitlog.end == end
        alone = SyncAppends(leader_store, leader, min_in_sync=1, timeout_s=0.3)
        assert await alone.append([_message(101)])  # minInSyncReplicas 1: the leader alone


async def test_an_async_append_is_answered_by_the_leaders_write_and_replicated_after(
    tmp_path: Path,
) -> None:
    async with _term_one(tmp_path) as (leader_store, follower_store, leader, port):
        asynchronous = SyncAppends(
            leader_store, leader, min_in_sync=2, timeout_s=0.3, synchronous=False
        )
        asynchronous.in_sync = ["f1"]  # f1 has not connected: SYNC would time out
        results = [(await asynchronous.append([_message(i)]))[0] for i in range(5)]
        assert leader.acked == {}  # answered with no follower holding anything
        asynchronous.in_sync = []  # below the minimum: SYNC would refuse it
        assert await asynchronous.append([_message(5)])
        end = leader_store.commitlog.end
        assert end > results[-1].physical_offset

        follower = Follower(follower_store, name="f1", token=TOKEN)
        running = asyncio.create_task(follower.run("127.0.0.1", port))
        await _until(follower, running, lambda: follower.log.state.end == end)
        assert _segments(follower_store) == _segments(leader_store)
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


@contextlib.asynccontextmanager
async def _term_one(
    tmp_path: Path,
) -> AsyncIterator[tuple[LocalStore, LocalStore, Leader, int]]:
    """A leader's store in term 1 serving on a port, and a follower's store."""
    leader_store, follower_store = await _open(tmp_path / "l"), await _open(tmp_path / "f")
    leader = Leader(leader_store, term=1, token=TOKEN, heartbeat_s=0.05)
    try:
        leader_store.record_epoch(1, 0)
        yield leader_store, follower_store, leader, await leader.start("127.0.0.1", 0)
    finally:
        await leader.stop()
        await leader_store.close()
        await follower_store.close()


async def test_a_leader_that_stops_ends_every_followers_connection(tmp_path: Path) -> None:
    """A leader that steps down streams no more: its next term's leader may truncate its
    log, and a connection left streaming read past the cut (kind's isolation step)."""
    leader_store, follower_store = await _open(tmp_path / "l"), await _open(tmp_path / "f")
    leader = Leader(leader_store, term=1, token=TOKEN, heartbeat_s=0.05)
    try:
        await _term(leader_store, 1, random.Random(5), 10)
        port = await leader.start("127.0.0.1", 0)
        follower = Follower(follower_store, name="f1", token=TOKEN)
        running = asyncio.create_task(follower.run("127.0.0.1", port))
        await _until(
            follower, running, lambda: follower.log.state.end == leader_store.commitlog.end
        )
        await leader.stop()
        await asyncio.wait_for(running, WAIT_S)  # the connection ended: the follow returns
    finally:
        await leader.stop()
        await leader_store.close()
        await follower_store.close()
