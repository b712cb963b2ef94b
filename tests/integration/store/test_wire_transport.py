"""The store wire API over real Unix sockets: errors, restarts, and a store process."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from popbroker.store import api, errors
from popbroker.store.local import LocalStore
from popbroker.store.settings import StoreSettings
from popbroker.store.wire import server
from popbroker.store.wire.client import RemoteStore
from tests.integration.store.remote_fixture import (
    SpawnStore,
    short_socket_dir,
    store_process_factory,
)
from tests.storesettings import small_settings

TOPIC = api.TopicConfig("orders", 4, 4)


class ExplodingStore(LocalStore):
    """A store with a bug: ``topics`` raises something that is not a StoreError."""

    async def topics(self) -> list[api.TopicConfig]:
        raise RuntimeError("bug in topics")


@pytest.fixture
def socket_path() -> Iterator[Path]:
    directory = short_socket_dir()
    yield directory / "store.sock"
    for child in directory.iterdir():
        child.unlink()
    directory.rmdir()


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[SpawnStore]:
    with store_process_factory(tmp_path) as factory:
        yield factory


@pytest.fixture
async def local(tmp_path: Path) -> AsyncIterator[LocalStore]:
    store = ExplodingStore.open(tmp_path / "data", StoreSettings())
    yield store
    await store.close()


@pytest.fixture
async def remote(local: LocalStore, socket_path: Path) -> AsyncIterator[RemoteStore]:
    grpc_server = await server.serve(local, socket_path=socket_path)
    client = RemoteStore.connect(server.unix_target(socket_path), timeout_s=5.0)
    await client.wait_ready(5.0)
    assert client.framed  # the errors below cross the framed socket
    yield client
    await client.close()
    await grpc_server.stop(0)


def _message(queue_id: int, body: bytes = b"hello", tag: str = "A") -> api.MessageToAppend:
    return api.MessageToAppend(TOPIC.name, queue_id, body, {api.PROPERTY_TAGS: tag})


async def test_store_errors_arrive_as_the_same_types(remote: RemoteStore) -> None:
    await remote.put_topic(TOPIC)
    with pytest.raises(errors.InvalidName, match="must match"):
        await remote.put_topic(api.TopicConfig("no spaces", 1, 1))
    with pytest.raises(errors.EmptyBody):
        await remote.append([_message(0, b"")])
    with pytest.raises(errors.MessageTooLarge):
        await remote.append([_message(0, b"x" * (StoreSettings().max_body_bytes + 1))])
    with pytest.raises(errors.InvalidArgument, match="out of range"):
        await remote.read(TOPIC.name, 2**40, 0, max_count=1)
    # Nothing of the refused batches was written.
    assert (await remote.bounds(TOPIC.name, 0)).max_queue_offset == 0


async def test_a_bug_in_the_store_is_internal_and_the_server_survives(
    remote: RemoteStore,
) -> None:
    with pytest.raises(errors.StoreError, match="bug in topics") as caught:
        await remote.topics()
    assert type(caught.value) is errors.StoreError
    assert (await remote.info()).writable


async def test_optional_fields_keep_none(remote: RemoteStore) -> None:
    await remote.put_topic(TOPIC)
    assert await remote.committed_offset(group="g", topic=TOPIC.name, queue_id=0) is None
    await remote.commit_offset(group="g", topic=TOPIC.name, queue_id=0, queue_offset=0)
    assert await remote.committed_offset(group="g", topic=TOPIC.name, queue_id=0) == 0
    await remote.commit_offset(group="h", topic=TOPIC.name, queue_id=1, queue_offset=5)
    assert await remote.committed_offsets("h") == [api.CommittedOffset("h", TOPIC.name, 1, 5)]
    assert len(await remote.committed_offsets()) == 2
    await remote.delete_offsets("g")
    assert await remote.committed_offsets() == [api.CommittedOffset("h", TOPIC.name, 1, 5)]


async def test_unreachable_store_is_retriable_store_closed(socket_path: Path) -> None:
    client = RemoteStore.connect(server.unix_target(socket_path), timeout_s=0.5)
    try:
        with pytest.raises(errors.StoreClosed) as caught:
            await client.info()
        assert caught.value.retriable
    finally:
        await client.close()


async def test_arrivals_survive_a_server_restart(local: LocalStore, socket_path: Path) -> None:
    await local.put_topic(TOPIC)
    first = await server.serve(local, socket_path=socket_path)
    client = RemoteStore.connect(server.unix_target(socket_path), timeout_s=5.0)
    received: asyncio.Queue[api.Arrival] = asyncio.Queue()

    async def collect() -> None:
        async for arrival in client.arrivals():
            received.put_nowait(arrival)

    collector = asyncio.create_task(collect())

    async def arrival_of_queue(queue_id: int) -> api.Arrival:
        # The stream may not be subscribed yet: append until one arrives (bounded).
        for _ in range(50):
            await local.append([_message(queue_id)])
            try:
                while True:
                    arrival = await asyncio.wait_for(received.get(), 0.2)
                    if arrival.queue_id == queue_id:
                        return arrival
            except TimeoutError:
                continue
        raise AssertionError(f"no arrival of queue {queue_id} within 50 appends")

    try:
        assert (await arrival_of_queue(1)).topic == TOPIC.name
        await first.stop(0)
        second = await server.serve(local, socket_path=socket_path)
        try:
            assert (await arrival_of_queue(2)).topic == TOPIC.name
        finally:
            await second.stop(0)
    finally:
        await client.close()
        await asyncio.wait_for(collector, 5.0)  # close() ends the iterator


async def test_timing_out_a_read_of_arrivals_keeps_the_stream(remote: RemoteStore) -> None:
    await remote.put_topic(TOPIC)
    stream = remote.arrivals()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(anext(stream), 0.05)  # nothing yet: the wait is cancelled
    await remote.append([_message(0)])  # ordered after the subscription by the client
    arrival = await asyncio.wait_for(anext(stream), 5.0)
    assert (arrival.topic, arrival.queue_id, arrival.queue_offset) == (TOPIC.name, 0, 0)
    await stream.aclose()  # type: ignore[attr-defined]
    with pytest.raises(StopAsyncIteration):
        await anext(stream)


async def test_serve_replaces_a_stale_socket_and_refuses_a_live_one(
    local: LocalStore, socket_path: Path
) -> None:
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(socket_path))
    stale.close()  # the file stays, nobody listens: what a SIGKILLed store leaves
    grpc_server = await server.serve(local, socket_path=socket_path)
    try:
        with pytest.raises(FileExistsError, match="another process"):
            await server.serve(local, socket_path=socket_path)
    finally:
        await grpc_server.stop(0)


async def test_store_process_keeps_acknowledged_appends_across_kill_9(
    spawn: SpawnStore, tmp_path: Path
) -> None:
    process = spawn(tmp_path / "data", settings=small_settings(flush_mode=api.FlushMode.SYNC))
    client = await process.connect()
    try:
        await client.put_topic(TOPIC)
        bodies = [os.urandom(64) for _ in range(20)]
        for body in bodies:
            await client.append([_message(3, body)])
    finally:
        await client.close()

    process.restart(crash=True)
    client = await process.connect()
    try:
        result = await client.read(TOPIC.name, 3, 0, max_count=32)
        assert result.status is api.ReadStatus.FOUND
        assert [m.body for m in result.messages] == bodies
        assert [m.queue_offset for m in result.messages] == list(range(20))
    finally:
        await client.close()
    assert process.terminate() == 0
