"""Framed calls (``popbroker.store.wire.frames``) on real Unix sockets: pairing of answers,
errors, lost connections, bad frames, deadlines, and ``RemoteStore`` over a restart."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from popbroker.store import api, errors
from popbroker.store.local import LocalStore
from popbroker.store.settings import StoreSettings
from popbroker.store.wire import frames, server
from popbroker.store.wire.client import RemoteStore
from tests.integration.store.remote_fixture import short_socket_dir


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    directory = short_socket_dir()
    yield directory
    for child in directory.iterdir():
        child.unlink()
    directory.rmdir()


class Gate:
    """Handlers that answer only when the test opens their gate, and echo their request."""

    def __init__(self) -> None:
        self.gates: dict[bytes, asyncio.Event] = {}
        self.arrived = asyncio.Queue[bytes]()
        self.cancelled = asyncio.Queue[bytes]()

    async def echo(self, request: bytes) -> bytes:
        gate = self.gates.setdefault(request, asyncio.Event())
        self.arrived.put_nowait(request)
        try:
            await gate.wait()
        except asyncio.CancelledError:
            self.cancelled.put_nowait(request)
            raise
        return b"echo:" + request

    async def refuse(self, request: bytes) -> bytes:
        raise errors.UnknownTopic(f"topic {request.decode()!r} does not exist")

    async def bug(self, request: bytes) -> bytes:
        raise RuntimeError("bug in the handler")

    def handlers(self) -> dict[str, frames.Handler]:
        return {"Echo": self.echo, "Refuse": self.refuse, "Bug": self.bug}


@pytest.fixture
async def gate_server(socket_dir: Path) -> AsyncIterator[tuple[Gate, Path]]:
    gate = Gate()
    frame_server = frames.FrameServer(gate.handlers())
    path = socket_dir / "s.frames"
    await frame_server.start(path)
    yield gate, path
    for event in gate.gates.values():
        event.set()
    await frame_server.close(None)


async def test_concurrent_calls_get_their_own_answers_in_any_order(
    gate_server: tuple[Gate, Path],
) -> None:
    gate, path = gate_server
    channel = frames.FrameChannel(path)
    try:
        requests = [f"call-{i}".encode() for i in range(40)]
        calls = [
            asyncio.create_task(channel.call("Echo", r, timeout_s=10, wait=False)) for r in requests
        ]
        arrived = {await asyncio.wait_for(gate.arrived.get(), 10) for _ in requests}
        assert arrived == set(requests)
        for request in reversed(requests):  # answered in the opposite order
            gate.gates[request].set()
        answers = await asyncio.gather(*calls)
        assert answers == [b"echo:" + r for r in requests]
    finally:
        await channel.close()


async def test_errors_keep_their_type_and_a_bug_is_internal(
    gate_server: tuple[Gate, Path],
) -> None:
    _, path = gate_server
    channel = frames.FrameChannel(path)
    try:
        with pytest.raises(errors.UnknownTopic, match="'nope' does not exist"):
            await channel.call("Refuse", b"nope", timeout_s=5, wait=False)
        with pytest.raises(errors.StoreError, match="bug in the handler") as caught:
            await channel.call("Bug", b"", timeout_s=5, wait=False)
        assert type(caught.value) is errors.StoreError and not caught.value.retriable
        with pytest.raises(errors.StoreError, match="no framed method 'Nothing'"):
            await channel.call("Nothing", b"", timeout_s=5, wait=False)
        # the connection survived all three
        gate_request = b"after"
        answer = asyncio.create_task(channel.call("Echo", gate_request, timeout_s=5, wait=False))
        await asyncio.wait_for(_open_gate_when_arrived(gate_server[0], gate_request), 5)
        assert await answer == b"echo:after"
    finally:
        await channel.close()


async def _open_gate_when_arrived(gate: Gate, request: bytes) -> None:
    while await gate.arrived.get() != request:
        pass
    gate.gates[request].set()


async def test_a_call_without_an_answer_times_out_as_retriable(
    gate_server: tuple[Gate, Path],
) -> None:
    _, path = gate_server
    channel = frames.FrameChannel(path)
    try:
        with pytest.raises(errors.StoreClosed, match="DEADLINE_EXCEEDED") as caught:
            await channel.call("Echo", b"never", timeout_s=0.2, wait=False)
        assert caught.value.retriable
    finally:
        await channel.close()


async def test_no_server_is_store_closed_at_once_or_after_the_deadline(socket_dir: Path) -> None:
    channel = frames.FrameChannel(socket_dir / "absent.frames")
    loop = asyncio.get_running_loop()
    with pytest.raises(errors.StoreClosed, match="unreachable"):
        await channel.call("Echo", b"", timeout_s=5, wait=False)
    started = loop.time()
    with pytest.raises(errors.StoreClosed, match="unreachable"):
        await channel.call("Echo", b"", timeout_s=0.3, wait=True)
    assert loop.time() - started < 2.0  # bounded by the deadline, not by retries


async def test_calls_in_flight_fail_when_the_connection_is_lost_and_the_next_reconnects(
    socket_dir: Path,
) -> None:
    gate = Gate()
    path = socket_dir / "s.frames"
    first = frames.FrameServer(gate.handlers())
    await first.start(path)
    channel = frames.FrameChannel(path)
    try:
        in_flight = asyncio.create_task(channel.call("Echo", b"held", timeout_s=10, wait=True))
        assert await asyncio.wait_for(gate.arrived.get(), 5) == b"held"
        await first.close(None)  # the store goes away with the call unanswered
        with pytest.raises(errors.StoreClosed) as caught:
            await in_flight
        assert caught.value.retriable
        assert not path.exists()
        second = frames.FrameServer(gate.handlers())
        await second.start(path)
        try:
            gate.gates[b"again"] = asyncio.Event()
            gate.gates[b"again"].set()
            assert await channel.call("Echo", b"again", timeout_s=5, wait=True) == b"echo:again"
        finally:
            await second.close(None)
    finally:
        await channel.close()


async def test_a_client_sending_a_bad_frame_is_dropped_and_others_are_served(
    gate_server: tuple[Gate, Path],
) -> None:
    gate, path = gate_server
    reader, writer = await asyncio.open_unix_connection(str(path))
    writer.write(struct.pack(">IIB", 2**31, 1, 4) + b"Echo")  # a size beyond the limit
    await writer.drain()
    assert await asyncio.wait_for(reader.read(), 5) == b""  # the server hung up
    writer.close()
    channel = frames.FrameChannel(path)
    try:
        gate.gates[b"fine"] = asyncio.Event()
        gate.gates[b"fine"].set()
        assert await channel.call("Echo", b"fine", timeout_s=5, wait=False) == b"echo:fine"
    finally:
        await channel.close()


async def test_a_cancel_frame_cancels_that_call_only(gate_server: tuple[Gate, Path]) -> None:
    """An empty method cancels the call of that id on that connection (popfront sends one
    when its caller goes); the other call in flight is answered, the cancelled one never;
    a connection that ends cancels the calls it left running."""
    gate, path = gate_server
    reader, writer = await asyncio.open_unix_connection(str(path))

    def request(call_id: int, method: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">IIB", 5 + len(method) + len(body), call_id, len(method)) + method + body
        )

    writer.write(request(7, b"Echo", b"kept") + request(8, b"Echo", b"dropped"))
    await writer.drain()
    assert {await gate.arrived.get(), await gate.arrived.get()} == {b"kept", b"dropped"}
    dropped = gate.gates[b"dropped"]
    writer.write(struct.pack(">IIB", 5, 8, 0))  # cancel call 8
    await writer.drain()
    gate.gates[b"kept"].set()
    size, call_id, code = struct.unpack(">IIB", await reader.readexactly(9))
    assert (call_id, code, await reader.readexactly(size - 5)) == (7, 0, b"echo:kept")
    assert await asyncio.wait_for(gate.cancelled.get(), 5) == b"dropped"
    dropped.set()  # too late: the handler was cancelled, so no answer comes for call 8
    writer.write(request(9, b"Echo", b"after"))
    await writer.drain()
    assert await gate.arrived.get() == b"after"
    gate.gates[b"after"].set()
    size, call_id, code = struct.unpack(">IIB", await reader.readexactly(9))
    assert (call_id, code, await reader.readexactly(size - 5)) == (9, 0, b"echo:after")
    # A connection that ends cancels its calls still running (nobody is left to answer).
    writer.write(request(10, b"Echo", b"orphan"))
    await writer.drain()
    assert await gate.arrived.get() == b"orphan"
    writer.close()
    assert await asyncio.wait_for(gate.cancelled.get(), 5) == b"orphan"


async def test_remote_store_calls_are_framed_and_survive_a_store_restart(
    tmp_path: Path, socket_dir: Path
) -> None:
    local = LocalStore.open(tmp_path / "data", StoreSettings())
    path = socket_dir / "store.sock"
    wire = await server.serve(local, socket_path=path)
    client = RemoteStore.connect(server.unix_target(path), timeout_s=5.0)
    try:
        await client.wait_ready(5.0)
        assert client.framed
        assert frames.frames_path(path).exists()
        await client.put_topic(api.TopicConfig("orders", 2, 2))
        await wire.stop(0)
        assert not frames.frames_path(path).exists()
        wire = await server.serve(local, socket_path=path)
        results = await client.append([api.MessageToAppend("orders", 1, b"after a restart")])
        assert (results[0].queue_id, results[0].queue_offset) == (1, 0)
        read = await client.read("orders", 1, 0, max_count=4)
        assert [m.body for m in read.messages] == [b"after a restart"]
    finally:
        await client.close()
        await wire.stop(0)
        await local.close()


async def test_no_frames_socket_or_a_client_refusal_keeps_grpc(
    tmp_path: Path, socket_dir: Path
) -> None:
    local = LocalStore.open(tmp_path / "data", StoreSettings())
    path = socket_dir / "store.sock"
    wire = await server.serve(local, socket_path=path, frames_too=False)
    client = RemoteStore.connect(server.unix_target(path), timeout_s=5.0)
    unwilling = RemoteStore.connect(server.unix_target(path), timeout_s=5.0, frames_allowed=False)
    try:
        await client.wait_ready(5.0)
        assert not client.framed and not frames.frames_path(path).exists()
        assert (await client.info()).writable
        await wire.stop(0)
        wire = await server.serve(local, socket_path=path)
        await unwilling.wait_ready(5.0)
        assert not unwilling.framed
        assert (await unwilling.info()).writable
    finally:
        await client.close()
        await unwilling.close()
        await wire.stop(0)
        await local.close()
