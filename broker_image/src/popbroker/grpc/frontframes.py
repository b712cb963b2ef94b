"""popfront's hot v2 calls as framed calls on a Unix socket, through the same interceptors.

Why: behind popfront every v2 call crosses grpc.aio a second time, on the pod's Unix
socket, and grpc.aio's machinery (HTTP/2 framing, its poller thread, ``Handle._run``) costs
a fifth to a third of the Python process; at half load, where a call carries one to three
messages, it is most of the per-message cost. The store's wire went through the same and
moved its unary calls to length-prefixed frames (``popbroker.store.wire.frames``,
``docs/design/2026-11-28-store-frames.md``); this is the same step for popfront's hop.
The decision and its figures: ``docs/design/2026-11-28-front-frames.md``.

What travels framed (:data:`FRAMED_METHODS`): ``SendMessage``, ``AckMessage``,
``ChangeInvisibleDuration``, the batched receive (``popbroker.grpc.front.FRONT_RECEIVE``)
and sends encoded in the front (``popbroker.grpc.frontappends.FRONT_SEND``, framed only).
Everything else (routes, heartbeats, Telemetry's stream, the lite-pull RPCs) stays on
gRPC, and so does every call while the frames socket is not there: popfront uses the frames
only once it has connected to them and falls back to gRPC when they go.

The socket is the endpoint's, with ``.frames`` appended (``frames.frames_path``); the frames
are the store wire's (same framing, call ids, cancel frames). A request's bytes are an
envelope around the v2 request, integers big-endian::

    u32 timeout in ms (0xFFFFFFFF: none) | u16 metadata count |
    per entry: u8 len(key) | key (ASCII) | u32 len(value) | value | the v2 request

The metadata is the client's (popfront drops HTTP/2 pseudo-headers, as it does when it
forwards a call); a ``-bin`` key's value stays bytes, others are text. Python then does what
grpc.aio would: runs the server's interceptors (:class:`~popbroker.grpc.front.FrontBatching`,
call counting, the auth guard) on the method name and metadata, and calls the handler they
return with a context (:class:`FramedContext`) that answers what the servicer and the
interceptors ask of one: ``invocation_metadata()``, ``time_remaining()``, ``done()``. When
popfront's caller goes (cancel, deadline) popfront sends a cancel frame and the call is
cancelled here, as grpc.aio cancels a handler. A handler's exception is logged and answered
``INTERNAL``, as grpc.aio answers ``UNKNOWN``; the v2 handlers put failures in the response.
"""

from __future__ import annotations

import functools
import logging
import struct
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, NamedTuple

import grpc

from popbroker.grpc import front, frontappends
from popbroker.grpc.handlers import SERVICE_PREFIX
from popbroker.grpc.protocol import service
from popbroker.store.wire import frames

log = logging.getLogger(__name__)

FRAMED_METHODS: Final = (
    SERVICE_PREFIX + "SendMessage",
    SERVICE_PREFIX + "AckMessage",
    SERVICE_PREFIX + "ChangeInvisibleDuration",
    front.FRONT_RECEIVE,
    frontappends.FRONT_SEND,
)
NO_TIMEOUT: Final = 0xFFFFFFFF
_HEAD = struct.Struct(">IH")  # timeout ms, metadata count
_KEY = struct.Struct(">B")
_VALUE = struct.Struct(">I")


class EnvelopeError(ValueError):
    """A framed request whose envelope does not parse."""


Metadata = tuple[tuple[str, str | bytes], ...]


def parse_envelope(raw: bytes) -> tuple[Metadata, float | None, bytes]:
    """(metadata, timeout in seconds or None, the v2 request's bytes)."""
    try:
        timeout_ms, count = _HEAD.unpack_from(raw)
        pos = _HEAD.size
        entries: list[tuple[str, str | bytes]] = []
        for _ in range(count):
            (key_len,) = _KEY.unpack_from(raw, pos)
            key = raw[pos + 1 : pos + 1 + key_len].decode("ascii")
            pos += 1 + key_len
            (value_len,) = _VALUE.unpack_from(raw, pos)
            value = raw[pos + 4 : pos + 4 + value_len]
            if len(key) != key_len or len(value) != value_len:
                raise EnvelopeError("metadata entry cut short")
            pos += 4 + value_len
            entries.append((key, value if key.endswith("-bin") else value.decode("latin-1")))
    except (struct.error, UnicodeDecodeError) as exc:
        raise EnvelopeError(f"malformed envelope: {exc}") from exc
    timeout_s = None if timeout_ms == NO_TIMEOUT else timeout_ms / 1000
    return tuple(entries), timeout_s, raw[pos:]


class CallDetails(NamedTuple):
    """What interceptors read of a call (``grpc.HandlerCallDetails``'s fields)."""

    method: str
    invocation_metadata: Metadata


class FramedContext:
    """The servicer context of a framed call: what the servicer and interceptors use."""

    __slots__ = ("_deadline", "_metadata")

    def __init__(self, metadata: Metadata, timeout_s: float | None) -> None:
        self._metadata = metadata
        self._deadline = None if timeout_s is None else time.monotonic() + timeout_s

    def invocation_metadata(self) -> Metadata:
        return self._metadata

    def time_remaining(self) -> float | None:
        if self._deadline is None:
            return None
        return max(self._deadline - time.monotonic(), 0.0)

    def done(self) -> bool:
        """True once the deadline has passed (a cancelled call is cancelled, not asked)."""
        return self._deadline is not None and time.monotonic() >= self._deadline


def method_handlers(servicer: Any) -> dict[str, grpc.RpcMethodHandler]:
    """The handlers of the framed v2 methods (and the streaming ``ReceiveMessage`` that
    :class:`~popbroker.grpc.front.FrontBatching` turns ``FRONT_RECEIVE`` into), as the
    generated code registers them with a gRPC server."""

    def unary(rpc: str) -> grpc.RpcMethodHandler:
        return grpc.unary_unary_rpc_method_handler(
            getattr(servicer, rpc),
            request_deserializer=getattr(service, f"{rpc}Request").FromString,
            response_serializer=getattr(service, f"{rpc}Response").SerializeToString,
        )

    return {
        SERVICE_PREFIX + "SendMessage": unary("SendMessage"),
        SERVICE_PREFIX + "AckMessage": unary("AckMessage"),
        SERVICE_PREFIX + "ChangeInvisibleDuration": unary("ChangeInvisibleDuration"),
        front.V2_RECEIVE: grpc.unary_stream_rpc_method_handler(
            servicer.ReceiveMessage,
            request_deserializer=service.ReceiveMessageRequest.FromString,
            response_serializer=service.ReceiveMessageResponse.SerializeToString,
        ),
    }


class FramedV2:
    """Answers framed v2 calls through ``interceptors`` (in a grpc.aio server's order) and
    ``methods`` (:func:`method_handlers`)."""

    def __init__(
        self, methods: Mapping[str, grpc.RpcMethodHandler], interceptors: Sequence[Any]
    ) -> None:
        self._methods = dict(methods)
        self._interceptors = tuple(interceptors)

    def handlers(self) -> dict[str, frames.Handler]:
        """One frame handler per framed method (for ``frames.FrameServer``)."""
        return {method: functools.partial(self.call, method) for method in FRAMED_METHODS}

    async def _resolve(self, details: CallDetails, at: int = 0) -> Any:
        """The method handler the chain of interceptors from ``at`` on gives for ``details``."""
        if at == len(self._interceptors):
            return self._methods.get(details.method)
        continuation: Callable[[Any], Awaitable[Any]] = functools.partial(self._resolve, at=at + 1)
        return await self._interceptors[at].intercept_service(continuation, details)

    async def call(self, method: str, raw: bytes) -> bytes:
        """One framed call: envelope in, serialized response out."""
        metadata, timeout_s, request_bytes = parse_envelope(raw)
        handler = await self._resolve(CallDetails(method, metadata))
        if handler is None or handler.unary_unary is None:
            raise FramedCallError(grpc.StatusCode.UNIMPLEMENTED, f"{method} is not framed")
        request = handler.request_deserializer(request_bytes)
        response = await handler.unary_unary(request, FramedContext(metadata, timeout_s))
        return bytes(handler.response_serializer(response))


class FramedCallError(Exception):
    """A framed call refused with a gRPC status (not a failure in the v2 response)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def failure(method: str, exc: Exception) -> tuple[int, bytes]:
    """A framed call's exception as its answer: a bad envelope is ``INVALID_ARGUMENT``, a
    refusal keeps its code, anything else is logged and ``INTERNAL``."""
    if isinstance(exc, EnvelopeError | frontappends.MalformedRequest):
        return grpc.StatusCode.INVALID_ARGUMENT.value[0], frames.failure_payload("", str(exc))
    if isinstance(exc, FramedCallError):
        return exc.code.value[0], frames.failure_payload("", str(exc))
    log.error("v2 frames: %s failed unexpectedly", method, exc_info=exc)
    message = f"internal error in {method}: {type(exc).__name__}"
    return grpc.StatusCode.INTERNAL.value[0], frames.failure_payload("", message)


async def serve(
    servicer: Any, interceptors: Sequence[Any], socket_path: str
) -> frames.FrameServer | None:
    """Serve the framed methods beside the endpoint's socket; None when the path is too long
    for a Unix socket (popfront then keeps to gRPC)."""
    path = frames.frames_path(Path(socket_path))
    if not frames.fits(path):
        log.warning("v2 frames: %s is too long for a Unix socket; popfront stays on gRPC", path)
        return None
    server = frames.FrameServer(
        FramedV2(method_handlers(servicer), interceptors).handlers(),
        failure=failure,
        label="v2 frames",
    )
    await server.start(path)
    return server
