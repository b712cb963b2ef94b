"""Framed calls on a Unix socket: the store wire's unary methods without HTTP/2.

Why: a store call carries a batch (an ``Append`` of 32 x 1 KiB is 33 KB), and
grpc.aio moves such a request through HTTP/2 framing, flow control and its poller
thread at a cost that grows with the bytes. Between two processes of one pod that
is pure overhead; a length-prefixed frame on a Unix socket is one write and one
read. ``bench/store_wire_floor.py`` measures both; the decision is in
``docs/design/2026-11-28-store-frames.md``.

What stays on gRPC: ``Arrivals`` (a stream), every call over TCP, and every call of
a client whose store does not announce a frames socket (``StoreInfo.frames_socket``).
The messages are the same protobuf messages as the gRPC service's, and the same
``errormap`` turns errors into codes and back, so a client sees the same answers and
the same exception types on either transport.

Frames, all integers big-endian, one socket carrying any number of calls at once::

    request:  u32 size | u32 call id | u8 len(method) | method (ASCII) | request bytes
    answer:   u32 size | u32 call id | u8 code | payload

``size`` counts every byte after itself and is at most ``MAX_FRAME_BYTES``. An
answer's ``code`` is 0 with the serialized response as payload, or a
``grpc.StatusCode`` number with ``u8 len(error name) | error name | UTF-8 message``.
Answers come in any order; the call id pairs them with their requests. A request frame
with an empty method cancels the call of its id on that connection, if it still runs (no
answer follows); the store's client never sends one, popfront does when its caller goes
(``popbroker.grpc.frontframes``). The calls still running when their connection ends are
cancelled, as gRPC cancels a call whose client went. A peer that sends a malformed frame
is disconnected (logged); the client fails the calls
in flight on that connection with ``StoreClosed`` (as gRPC's UNAVAILABLE would:
an ``append`` in flight may or may not have happened) and reconnects on the next call.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import os
import struct
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Final

import grpc

from popbroker.store import errors
from popbroker.store.wire import errormap

log = logging.getLogger(__name__)

MAX_FRAME_BYTES: Final = 256 * 1024 * 1024  # as the gRPC service's message limit
_HEAD = struct.Struct(">IIB")  # size, call id, method length or answer code
_U8 = struct.Struct(">B")
_OK: Final = 0
_CODES: Final = {code.value[0]: code for code in grpc.StatusCode}
_RETRY_CONNECT_S: Final = (0.05, 0.1, 0.2, 0.4, 0.8)  # then every 0.8 s until the deadline
SUN_PATH_MAX: Final = 107  # sizeof(sockaddr_un.sun_path) - 1 on Linux


def frames_path(socket_path: Path) -> Path:
    """The frames socket beside a gRPC server's ``socket_path`` (the store's, popack's)."""
    return socket_path.with_name(socket_path.name + ".frames")


def fits(path: Path) -> bool:
    """Whether ``path`` can be bound as a Unix socket (its length in bytes)."""
    return len(os.fsencode(path)) <= SUN_PATH_MAX


Handler = Callable[[bytes], Awaitable[bytes]]
"""Serialized request in, serialized response out; raises ``StoreError`` to fail the call."""

Failure = Callable[[str, Exception], tuple[int, bytes]]
"""A handler's exception as an answer's (code, payload), given the method it was raised in."""


class FrameError(Exception):
    """A frame that breaks the format; the connection is dropped."""


async def _read_frame(reader: asyncio.StreamReader) -> tuple[int, int, bytes]:
    """``(call id, byte after the id, the rest)``; ``IncompleteReadError`` at a clean end."""
    head = await reader.readexactly(_HEAD.size)
    size, call_id, tag = _HEAD.unpack(head)
    if size < _HEAD.size - 4 or size > MAX_FRAME_BYTES:
        raise FrameError(f"frame size {size} out of range")
    rest = await reader.readexactly(size - (_HEAD.size - 4)) if size > _HEAD.size - 4 else b""
    return call_id, tag, rest


def _frame(call_id: int, tag: int, *parts: bytes) -> bytes:
    size = _HEAD.size - 4 + sum(len(p) for p in parts)
    if size > MAX_FRAME_BYTES:
        raise errors.InvalidArgument(f"a frame of {size} bytes exceeds {MAX_FRAME_BYTES}")
    return b"".join((_HEAD.pack(size, call_id, tag), *parts))


def failure_payload(name: str, message: str) -> bytes:
    """A failed answer's payload: ``u8 len(name) | name | UTF-8 message``."""
    raw_name = name.encode("ascii")
    return _U8.pack(len(raw_name)) + raw_name + message.encode("utf-8")


def store_failure(method: str, exc: Exception) -> tuple[int, bytes]:
    """A store error by ``errormap``; anything else is logged and answered as an internal
    ``StoreError``."""
    if not isinstance(exc, errors.StoreError):
        log.error("store frames: %s failed unexpectedly", method, exc_info=exc)
        exc = errors.StoreError(f"internal error in {method}: {type(exc).__name__}: {exc}")
    code, name = errormap.status_for(exc)
    return code.value[0], failure_payload(name, str(exc))


def _error_from_payload(code_number: int, payload: bytes) -> errors.StoreError:
    code = _CODES.get(code_number, grpc.StatusCode.UNKNOWN)
    try:
        name_len = payload[0]
        name = payload[1 : 1 + name_len].decode("ascii")
        message = payload[1 + name_len :].decode("utf-8")
    except (IndexError, UnicodeDecodeError):
        return errors.StoreError(f"store call failed ({code.name}) with an unreadable answer")
    return errormap.error_from_status(code, message, name)


# ------------------------------------------------------------------------- server


def _forget(running: dict[int, asyncio.Task[None]], call_id: int, _: object) -> None:
    running.pop(call_id, None)


class _Outbox:
    """A connection's answers, written together once per pass of the event loop.

    Calls that finish in the same pass (a popped batch's acks, the receives a new message
    woke) would each cost a ``send`` system call; queued here they go in one write, at the
    start of the next pass. Answers may go in any order, so nothing else changes."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._frames: list[bytes] = []

    async def send(self, frame: bytes) -> None:
        if self._writer.is_closing():
            return
        if not self._frames:
            asyncio.get_running_loop().call_soon(self._flush)
        self._frames.append(frame)
        with contextlib.suppress(ConnectionError):
            await self._writer.drain()  # back-pressure from the answers written before

    def _flush(self) -> None:
        frames, self._frames = self._frames, []
        if not self._writer.is_closing():
            self._writer.write(b"".join(frames))  # one frame: joined without a copy


class FrameServer:
    """Serves ``handlers`` (by method name) on a Unix socket; see the module docstring.

    ``failure`` turns a handler's exception into the answer (the store's errors by default);
    ``label`` names the server in its log lines."""

    def __init__(
        self,
        handlers: Mapping[str, Handler],
        *,
        failure: Failure = store_failure,
        label: str = "store frames",
    ) -> None:
        self._handlers = dict(handlers)
        self._failure = failure
        self._label = label
        self._server: asyncio.AbstractServer | None = None
        self._path: Path | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._calls: set[asyncio.Task[None]] = set()

    async def start(self, path: Path) -> None:
        self._server = await asyncio.start_unix_server(
            self._serve_connection, path=str(path), limit=2**16
        )
        self._path = path

    async def close(self, grace_s: float | None = None) -> None:
        """Stop accepting; let calls in flight finish for up to ``grace_s`` (None: cancel them
        at once); then drop every connection and remove the socket file."""
        if self._server is not None:
            self._server.close()
        if grace_s and self._calls:
            await asyncio.wait(list(self._calls), timeout=grace_s)
        for task in [*self._connections, *self._calls]:
            task.cancel()
        for task in [*self._connections, *self._calls]:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._server is not None:
            await self._server.wait_closed()
        if self._path is not None:
            self._path.unlink(missing_ok=True)

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        me = asyncio.current_task()
        if me is not None:
            self._connections.add(me)
        calls = self._calls
        outbox = _Outbox(writer)
        running: dict[int, asyncio.Task[None]] = {}  # this connection's calls, by id
        try:
            while True:
                call_id, method_len, rest = await _read_frame(reader)
                if method_len == 0:  # cancel: the caller went
                    cancelled = running.pop(call_id, None)
                    if cancelled is not None:
                        cancelled.cancel()
                    continue
                method = rest[:method_len].decode("ascii", "replace")
                if len(method) != method_len:
                    raise FrameError("method name cut short")
                call = asyncio.create_task(
                    self._answer(outbox, call_id, (method, rest[method_len:]))
                )
                calls.add(call)
                running[call_id] = call
                call.add_done_callback(calls.discard)
                call.add_done_callback(functools.partial(_forget, running, call_id))
        except asyncio.IncompleteReadError:
            pass  # the client closed its end
        except FrameError as exc:
            log.warning("%s: dropping a client that sent a bad frame: %s", self._label, exc)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            for orphan in running.values():  # nobody is left to answer, as gRPC cancels
                orphan.cancel()
            if me is not None:
                self._connections.discard(me)

    async def _answer(self, outbox: _Outbox, call_id: int, call: tuple[str, bytes]) -> None:
        method, request = call
        handler = self._handlers.get(method)
        try:
            if handler is None:
                code = grpc.StatusCode.UNIMPLEMENTED.value[0]
                frame = _frame(call_id, code, failure_payload("", f"no framed method {method!r}"))
            else:
                frame = _frame(call_id, _OK, await handler(request))
        except Exception as exc:  # noqa: BLE001 - the edge answers every failure
            code, payload = self._failure(method, exc)
            frame = _frame(call_id, code, payload)
        await outbox.send(frame)


# ------------------------------------------------------------------------- client


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.pending: dict[int, asyncio.Future[tuple[int, bytes]]] = {}
        self.task = asyncio.create_task(self._receive(reader), name="store frames answers")

    @property
    def open(self) -> bool:
        return not self.task.done() and not self.writer.is_closing()

    async def _receive(self, reader: asyncio.StreamReader) -> None:
        reason = "the store closed the connection"
        try:
            while True:
                call_id, code, payload = await _read_frame(reader)
                waiter = self.pending.pop(call_id, None)
                if waiter is not None and not waiter.done():
                    waiter.set_result((code, payload))
        except asyncio.IncompleteReadError:
            pass
        except FrameError as exc:
            reason = f"the store sent a bad frame: {exc}"
            log.warning("store frames: %s", reason)
        except (ConnectionError, OSError) as exc:
            reason = f"connection lost: {exc}"
        finally:
            self.writer.close()
            pending, self.pending = self.pending, {}
            for waiter in pending.values():
                if not waiter.done():
                    waiter.set_exception(errors.StoreClosed(f"store unreachable: {reason}"))


class FrameChannel:
    """Calls to one ``FrameServer``; connects on first use and again after a loss."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._ids = itertools.count(1)
        self._connection: _Connection | None = None
        self._connecting: asyncio.Lock | None = None

    @property
    def path(self) -> Path:
        return self._path

    async def call(self, method: str, request: bytes, *, timeout_s: float, wait: bool) -> bytes:
        """The serialized answer of ``method``; raises the store's error, ``StoreClosed``
        when the store cannot be reached (after retrying until the deadline if ``wait``)
        or does not answer within ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        connection = await self._connected(deadline, wait)
        call_id = next(self._ids) & 0xFFFFFFFF
        raw_method = method.encode("ascii")
        frame = _frame(call_id, len(raw_method), raw_method, request)
        waiter: asyncio.Future[tuple[int, bytes]] = loop.create_future()
        connection.pending[call_id] = waiter
        try:
            connection.writer.write(frame)
            if connection.writer.transport.get_write_buffer_size() > 2**20:
                await connection.writer.drain()
            code, payload = await asyncio.wait_for(waiter, max(deadline - loop.time(), 0.001))
        except TimeoutError:
            raise errors.StoreClosed(
                f"store unreachable (DEADLINE_EXCEEDED): no answer to {method} within {timeout_s}s"
            ) from None
        except (ConnectionError, OSError) as exc:
            raise errors.StoreClosed(f"store unreachable: {exc}") from None
        finally:
            connection.pending.pop(call_id, None)
        if code != _OK:
            raise _error_from_payload(code, payload)
        return payload

    async def _connected(self, deadline: float, wait: bool) -> _Connection:
        connection = self._connection
        if connection is not None and connection.open:
            return connection
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            connection = self._connection
            if connection is not None and connection.open:
                return connection
            loop = asyncio.get_running_loop()
            for attempt in itertools.count():
                try:
                    reader, writer = await asyncio.open_unix_connection(
                        str(self._path), limit=2**16
                    )
                except (FileNotFoundError, ConnectionRefusedError) as exc:
                    pause = _RETRY_CONNECT_S[min(attempt, len(_RETRY_CONNECT_S) - 1)]
                    if not wait or loop.time() + pause > deadline:
                        raise errors.StoreClosed(
                            f"store unreachable at {self._path}: {exc}"
                        ) from None
                    await asyncio.sleep(pause)
                    continue
                self._connection = _Connection(reader, writer)
                return self._connection
        raise AssertionError("unreachable")  # pragma: no cover

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.writer.close()
            connection.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await connection.task
