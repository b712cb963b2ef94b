"""Serve any ``StoreApi`` as the ``popbroker.store.v1.Store`` gRPC service (grpc.aio).

The ``store`` role calls ``serve(local_store, socket_path=...)``; the other roles
reach it with ``popbroker.store.wire.client.RemoteStore``. Inside a pod the roles
meet on a Unix socket in the shared volume (``unix:PATH``) or on the pod IP
(``listen="POD_IP:PORT"``), never on a fixed localhost port, so several broker
pods can share one host.

This module is an edge: each RPC converts the request (``convert``), awaits the
store, converts the answer. A ``StoreError`` ends the call with the status from
``errormap`` and the error's name in trailing metadata; any other exception is
logged here and answered as INTERNAL, so bad input never crashes the role.

Beside a Unix socket, the same unary methods are also served as framed calls
(``popbroker.store.wire.frames``, same messages, same servicer code, no HTTP/2) on
``<socket>.frames``; ``Info`` names that file, and ``RemoteStore`` then makes its
unary calls there. ``Arrivals`` stays on gRPC.

``Arrivals`` forwards the store's arrival iterator. A pump task reads it into a
bounded queue while the stream writes, and each write carries everything queued
by then (up to ``ARRIVALS_BATCH``), so a burst of appends costs one HTTP/2 frame,
not one per entry. When the client goes away the pump is cancelled and the
store's iterator closed.
"""

# ruff: noqa: N802 -- servicer methods carry the gRPC method names (Info, Append, ...)

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import socket
import stat
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Final, TypeVar

import grpc

from popbroker.store import api, errors
from popbroker.store.wire import convert, errormap, frames
from popbroker.store.wire import store_pb2 as pb
from popbroker.store.wire import store_pb2_grpc as pb_grpc
from popbroker.store.wire.frames import frames_path

log = logging.getLogger(__name__)

# A read answers at most max_count bodies of up to 4 MiB each (32 for a POP batch);
# 256 MiB leaves room for that plus headers while still bounding a runaway message.
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
ARRIVALS_BATCH = 512
ARRIVALS_QUEUE = 8192

SERVER_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    # The roles stay connected for the life of the pod; keep idle streams alive.
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.so_reuseport", 0),
)

_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")
_Servicer = TypeVar("_Servicer", bound="StoreServicer")


async def _abort(context: grpc.aio.ServicerContext, exc: errors.StoreError) -> None:
    code, name = errormap.status_for(exc)
    await context.abort(code, str(exc), trailing_metadata=((errormap.ERROR_METADATA_KEY, name),))


def _internal(method: str, exc: Exception) -> errors.StoreError:
    log.exception("store wire: %s failed unexpectedly", method)
    return errors.StoreError(f"internal error in {method}: {type(exc).__name__}: {exc}")


def _answering(
    method: Callable[[_Servicer, _Req, Any], Awaitable[_Resp]],
) -> Callable[[_Servicer, _Req, Any], Awaitable[_Resp]]:
    """Wrap a unary RPC so every failure becomes a status (see the module docstring)."""

    @functools.wraps(method)
    async def wrapper(self: _Servicer, request: _Req, context: grpc.aio.ServicerContext) -> _Resp:
        try:
            return await method(self, request, context)
        except errors.StoreError as exc:
            failure = exc
        except Exception as exc:  # noqa: BLE001 -- the edge: log and answer INTERNAL
            failure = _internal(method.__name__, exc)
        await _abort(context, failure)
        raise AssertionError("context.abort returned")  # pragma: no cover

    return wrapper


class StoreServicer(pb_grpc.StoreServicer):
    """The ``Store`` service over one ``StoreApi`` implementation.

    ``frames_socket`` is the file name of the framed-call socket beside the gRPC one
    (``frames``), announced in ``Info``; empty when there is none.
    """

    def __init__(self, store: api.StoreApi, *, frames_socket: str = "") -> None:
        self._store = store
        self.frames_socket = frames_socket

    @_answering
    async def Info(
        self, request: pb.InfoRequest, context: grpc.aio.ServicerContext
    ) -> pb.StoreInfo:
        info = convert.info_to_pb(await self._store.info())
        info.frames_socket = self.frames_socket
        return info

    @_answering
    async def Append(
        self, request: pb.AppendRequest, context: grpc.aio.ServicerContext
    ) -> pb.AppendResponse:
        results = await self._store.append_records(request.records)
        return pb.AppendResponse(packed_results=convert.pack_append_results(results))

    @_answering
    async def Read(
        self, request: pb.ReadRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReadResponse:
        result = await self._store.read(
            request.topic,
            request.queue_id,
            request.queue_offset,
            max_count=request.max_count,
            tag_filter=request.tag_filter,
            max_scan=request.max_scan,
        )
        return convert.read_result_to_pb(result)

    @_answering
    async def Bounds(
        self, request: pb.BoundsRequest, context: grpc.aio.ServicerContext
    ) -> pb.QueueBounds:
        return convert.bounds_to_pb(await self._store.bounds(request.topic, request.queue_id))

    async def Arrivals(
        self, request: pb.ArrivalsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ArrivalsResponse]:
        queue: asyncio.Queue[api.Arrival | Exception] = asyncio.Queue(ARRIVALS_QUEUE)
        source = self._store.arrivals(request.topic or None)
        pump = asyncio.create_task(_pump_arrivals(source, queue))
        failure: Exception | None = None
        try:
            # One loop turn lets the pump reach its first await, i.e. subscribe (a store
            # registers its listener before it first waits); then confirm to the client.
            await asyncio.sleep(0)
            yield pb.ArrivalsResponse()
            while failure is None:
                batch, failure = await _next_batch(queue)
                if batch:
                    yield pb.ArrivalsResponse(arrivals=batch)
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
        if isinstance(failure, errors.StoreError):
            await _abort(context, failure)
        else:
            await _abort(context, _internal("Arrivals", failure))

    @_answering
    async def CommitOffset(
        self, request: pb.CommitOffsetRequest, context: grpc.aio.ServicerContext
    ) -> pb.CommitOffsetResponse:
        await self._store.commit_offset(
            group=request.group,
            topic=request.topic,
            queue_id=request.queue_id,
            queue_offset=request.queue_offset,
        )
        return pb.CommitOffsetResponse()

    @_answering
    async def CommittedOffset(
        self, request: pb.CommittedOffsetRequest, context: grpc.aio.ServicerContext
    ) -> pb.CommittedOffsetResponse:
        queue_offset = await self._store.committed_offset(
            group=request.group, topic=request.topic, queue_id=request.queue_id
        )
        return pb.CommittedOffsetResponse(queue_offset=queue_offset)

    @_answering
    async def CommittedOffsets(
        self, request: pb.CommittedOffsetsRequest, context: grpc.aio.ServicerContext
    ) -> pb.CommittedOffsetsResponse:
        group = request.group if request.HasField("group") else None
        rows = await self._store.committed_offsets(group)
        return pb.CommittedOffsetsResponse(
            offsets=[convert.committed_offset_to_pb(r) for r in rows]
        )

    @_answering
    async def DeleteOffsets(
        self, request: pb.DeleteOffsetsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteOffsetsResponse:
        topic = request.topic if request.HasField("topic") else None
        await self._store.delete_offsets(request.group, topic)
        return pb.DeleteOffsetsResponse()

    @_answering
    async def PutTopic(
        self, request: pb.PutTopicRequest, context: grpc.aio.ServicerContext
    ) -> pb.TopicConfig:
        if not request.HasField("topic"):
            raise errors.InvalidArgument("topic: missing")
        stored = await self._store.put_topic(convert.topic_from_pb(request.topic))
        return convert.topic_to_pb(stored)

    @_answering
    async def DeleteTopic(
        self, request: pb.DeleteTopicRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteTopicResponse:
        await self._store.delete_topic(request.name)
        return pb.DeleteTopicResponse()

    @_answering
    async def Topics(
        self, request: pb.TopicsRequest, context: grpc.aio.ServicerContext
    ) -> pb.TopicsResponse:
        return pb.TopicsResponse(
            topics=[convert.topic_to_pb(t) for t in await self._store.topics()]
        )

    @_answering
    async def PutGroup(
        self, request: pb.PutGroupRequest, context: grpc.aio.ServicerContext
    ) -> pb.GroupConfig:
        if not request.HasField("group"):
            raise errors.InvalidArgument("group: missing")
        stored = await self._store.put_group(convert.group_from_pb(request.group))
        return convert.group_to_pb(stored)

    @_answering
    async def DeleteGroup(
        self, request: pb.DeleteGroupRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteGroupResponse:
        await self._store.delete_group(request.name)
        return pb.DeleteGroupResponse()

    @_answering
    async def Groups(
        self, request: pb.GroupsRequest, context: grpc.aio.ServicerContext
    ) -> pb.GroupsResponse:
        return pb.GroupsResponse(
            groups=[convert.group_to_pb(g) for g in await self._store.groups()]
        )

    @_answering
    async def PutConsumeMode(
        self, request: pb.PutConsumeModeRequest, context: grpc.aio.ServicerContext
    ) -> pb.ConsumeModeConfig:
        if not request.HasField("mode"):
            raise errors.InvalidArgument("mode: missing")
        stored = await self._store.put_consume_mode(convert.consume_mode_from_pb(request.mode))
        return convert.consume_mode_to_pb(stored)

    @_answering
    async def ConsumeModes(
        self, request: pb.ConsumeModesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ConsumeModesResponse:
        modes = await self._store.consume_modes()
        return pb.ConsumeModesResponse(modes=[convert.consume_mode_to_pb(m) for m in modes])

    @_answering
    async def SetMembers(
        self, request: pb.SetMembersRequest, context: grpc.aio.ServicerContext
    ) -> pb.SetMembersResponse:
        await self._store.set_members([convert.member_from_pb(m) for m in request.members])
        return pb.SetMembersResponse()

    @_answering
    async def Members(
        self, request: pb.MembersRequest, context: grpc.aio.ServicerContext
    ) -> pb.MembersResponse:
        members = await self._store.members()
        return pb.MembersResponse(members=[convert.member_to_pb(m) for m in members])


async def _next_batch(
    queue: asyncio.Queue[api.Arrival | Exception],
) -> tuple[list[pb.Arrival], Exception | None]:
    """Wait for one arrival, then take what else is queued (up to ``ARRIVALS_BATCH``)."""
    batch: list[pb.Arrival] = []
    item = await queue.get()
    while True:
        if isinstance(item, Exception):
            return batch, item
        batch.append(convert.arrival_to_pb(item))
        if len(batch) >= ARRIVALS_BATCH or queue.empty():
            return batch, None
        item = queue.get_nowait()


async def _pump_arrivals(
    source: AsyncIterator[api.Arrival], queue: asyncio.Queue[api.Arrival | Exception]
) -> None:
    """Copy arrivals into ``queue``; a failure is queued as the last item."""
    try:
        async for arrival in source:
            await queue.put(arrival)
        await queue.put(errors.StoreClosed("the store's arrival stream ended"))
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 -- handed to the stream, which answers it
        await queue.put(exc)
    finally:
        aclose = getattr(source, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()


def build_server(servicer: StoreServicer) -> grpc.aio.Server:
    """A server with the ``Store`` service and no ports yet (``serve`` binds and starts)."""
    server = grpc.aio.server(options=SERVER_OPTIONS)
    pb_grpc.add_StoreServicer_to_server(servicer, server)
    return server


UNARY_METHODS: Final = tuple(
    m.name
    for m in pb.DESCRIPTOR.services_by_name["Store"].methods
    if not m.client_streaming and not m.server_streaming
)
"""The ``Store`` methods the framed socket serves (all but the ``Arrivals`` stream)."""


def frame_handlers(servicer: StoreServicer) -> dict[str, frames.Handler]:
    """Every unary method of ``servicer`` as a framed-call handler: the same request and
    response messages, the same code behind them, a ``StoreError`` raised as it is."""
    methods = pb.DESCRIPTOR.services_by_name["Store"].methods_by_name

    def handler(name: str) -> frames.Handler:
        parse = getattr(pb, methods[name].input_type.name).FromString
        answer = getattr(servicer, name).__wrapped__  # the method inside ``_answering``

        async def call(request: bytes) -> bytes:
            response = await answer(servicer, parse(request), None)
            return bytes(response.SerializeToString())

        return call

    return {name: handler(name) for name in UNARY_METHODS}


class StoreWire:
    """A serving store wire: the gRPC server and, beside a Unix socket, the framed one."""

    def __init__(self, grpc_server: grpc.aio.Server, frame_server: frames.FrameServer | None):
        self.grpc_server = grpc_server
        self.frame_server = frame_server

    async def stop(self, grace_s: float | None) -> None:
        """Stop both; calls in flight get ``grace_s`` to finish (None: none)."""
        if self.frame_server is not None:
            await self.frame_server.close(grace_s)
        await self.grpc_server.stop(grace_s)


def unix_target(socket_path: Path | str) -> str:
    """The gRPC target of a Unix socket path (absolute, so the URI is unambiguous)."""
    return f"unix:{Path(socket_path).absolute()}"


def remove_stale_socket(socket_path: Path) -> None:
    """Unlink a socket file left by a dead store; refuse if a live one answers on it.

    The roles of a pod share the volume, so a restarted store finds its old socket.
    Anything at the path that is not a socket is left alone and refused.
    """
    try:
        mode = socket_path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise FileExistsError(f"{socket_path} exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(str(socket_path))
    except OSError as exc:
        if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT):
            raise
        socket_path.unlink(missing_ok=True)
        return
    finally:
        probe.close()
    raise FileExistsError(f"another process is serving on {socket_path}")


async def serve(
    store: api.StoreApi,
    *,
    socket_path: Path | str | None = None,
    listen: str | None = None,
    frames_too: bool = True,
) -> StoreWire:
    """Start serving ``store`` on a Unix socket and/or ``HOST:PORT``; returns what serves.

    With a Unix socket (and ``frames_too``), the unary methods are also served as framed
    calls on ``frames_path(socket_path)``, and ``Info`` names that file. Stop with
    ``await wire.stop(grace_s)``; both socket files are removed.
    """
    if socket_path is None and listen is None:
        raise ValueError("serve needs socket_path, listen or both")
    path = None if socket_path is None else Path(socket_path).absolute()
    framed = None
    if path is not None:
        if not frames.fits(path):
            raise ValueError(f"socket path longer than {frames.SUN_PATH_MAX} bytes: {path}")
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_socket(path)
        if frames_too and frames.fits(frames_path(path)):
            framed = frames_path(path)
            remove_stale_socket(framed)
    servicer = StoreServicer(store, frames_socket=framed.name if framed else "")
    server = build_server(servicer)
    frame_server = frames.FrameServer(frame_handlers(servicer)) if framed else None
    try:
        if path is not None:
            server.add_insecure_port(unix_target(path))
        if listen is not None:
            server.add_insecure_port(listen)
        await server.start()
        if frame_server is not None and framed is not None:
            await frame_server.start(framed)
    except BaseException:
        if frame_server is not None:
            await frame_server.close()
        await server.stop(None)
        raise
    served = (socket_path, framed, listen)
    log.info("store wire: serving on %s", ", ".join(str(t) for t in served if t))
    return StoreWire(server, frame_server)
