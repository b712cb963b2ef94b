"""The compiled front end's batched receive: one unary answer per ``ReceiveMessage``.

A v2 ``ReceiveMessage`` answer is a stream with one response per message, and
on this machine grpc.aio spends about 60 microseconds of server CPU per streamed response
(``bench/grpc_floor.py``), which is the whole per-message budget of issue 17.
The front end (``broker_image/front``, the ``popfront`` binary) terminates the
clients' connections and forwards every call to this endpoint unchanged, except
``ReceiveMessage``: that it asks as one unary call of ``FRONT_RECEIVE``
(request: the client's ``ReceiveMessageRequest``; answer: a ``ReceiveBatch``,
``repeated bytes responses = 1``, each element one serialized
``ReceiveMessageResponse`` in stream order) and then streams the responses to
the client itself. The design note is
``docs/design/2026-11-27-compiled-front-end.md``.

:class:`FrontBatching` is a server interceptor, first in the chain. For
``FRONT_RECEIVE`` it asks the rest of the chain for the v2 ``ReceiveMessage``
handler -- so call counting and the auth guard see a ``ReceiveMessage``, as
without a front end -- and answers with that handler's responses collected.
Every other method passes through untouched.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc

from popbroker.grpc.handlers import SERVICE_PREFIX

FRONT_RECEIVE = "/popfleet.front.v1.Front/ReceiveMessage"
V2_RECEIVE = SERVICE_PREFIX + "ReceiveMessage"

_RESPONSES_TAG = b"\x0a"  # field 1, wire type 2 (length-delimited)


def encode_batch(serialized: Sequence[bytes]) -> bytes:
    """A ``ReceiveBatch`` of ``serialized`` responses (see the module docstring).

    The message has one repeated ``bytes`` field, so its encoding is each
    element as tag 1, varint length, bytes. Written here rather than generated:
    the Python side never reads a ``ReceiveBatch``, and the responses arrive
    already serialized by their own message class.
    """
    out = bytearray()
    for item in serialized:
        out += _RESPONSES_TAG
        size = len(item)
        while size >= 0x80:
            out.append((size & 0x7F) | 0x80)
            size >>= 7
        out.append(size)
        out += item
    return bytes(out)


class FrontBatching(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Serves ``FRONT_RECEIVE`` as the collected v2 ``ReceiveMessage`` (module docstring)."""

    async def intercept_service(
        self,
        continuation: Callable[[Any], Awaitable[Any]],
        handler_call_details: Any,
    ) -> Any:
        if handler_call_details.method != FRONT_RECEIVE:
            return await continuation(handler_call_details)
        # grpc.aio's continuation accepts only its own details type (a Cython class
        # built from method and metadata), so the renamed details are one of those.
        details = type(handler_call_details)(V2_RECEIVE, handler_call_details.invocation_metadata)
        handler = await continuation(details)
        if handler is None or handler.unary_stream is None:
            return None
        streaming = handler.unary_stream
        serialize = handler.response_serializer

        async def batched(request: Any, context: Any) -> list[bytes]:
            return [serialize(response) async for response in streaming(request, context)]

        return grpc.unary_unary_rpc_method_handler(
            batched,
            request_deserializer=handler.request_deserializer,
            response_serializer=encode_batch,
        )
