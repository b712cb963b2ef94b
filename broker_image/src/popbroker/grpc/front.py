"""The compiled front end's batched receive: one unary answer per ``ReceiveMessage``.

A v2 ``ReceiveMessage`` answer is a stream with one response per message, and
on this machine grpc.aio spends about 60 microseconds of server CPU per streamed response
(``bench/grpc_floor.py``), which is the whole per-message budget of issue 17.
The front end (``broker_image/front``, the ``popfront`` binary) terminates the
clients' connections and forwards every call to this endpoint unchanged, except
``ReceiveMessage``: that it asks as one unary call of ``FRONT_RECEIVE``
(request: the client's ``ReceiveMessageRequest``; answer: a ``ReceiveBatch``,
``repeated bytes responses = 1``, one item per response in stream order) and then
streams the responses to the client itself. An item's first byte says what the
rest is: ``R``, a serialized ``ReceiveMessageResponse``; ``D``, a delivery
(:func:`encode_delivery`): the popped message's commit-log record as stored plus
what this delivery adds, from which popfront builds the client's ``Message``
(``broker_image/front/delivery.go``; the reference it is tested against is
:func:`popbroker.grpc.convert.delivered_message`). Building that message is the
largest piece of per-message work left in Python, and in Go it is a few
microseconds. A message read without its record (the roles shape: the store's
wire carries fields) goes as ``R``. The design notes are
``docs/design/2026-11-27-compiled-front-end.md`` and
``docs/design/2026-11-28-deliveries-built-in-the-front.md``.

:class:`FrontBatching` is a server interceptor, first in the chain. For
``FRONT_RECEIVE`` it asks the rest of the chain for the v2 ``ReceiveMessage``
handler -- so call counting and the auth guard see a ``ReceiveMessage``, as
without a front end -- and answers with that handler's responses collected.
While it collects them, :data:`DELIVERIES_TO_FRONT` is set, which tells the
servicer to yield a :class:`FrontDelivery` instead of building each message.
Every other method passes through untouched.
"""

from __future__ import annotations

import contextvars
import struct
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc

from popbroker.grpc import frontappends
from popbroker.grpc.handlers import SERVICE_PREFIX
from popbroker.services.messages import DeliveredMessage
from popbroker.values import per_message

FRONT_RECEIVE = "/popfleet.front.v1.Front/ReceiveMessage"
V2_RECEIVE = SERVICE_PREFIX + "ReceiveMessage"
V2_SEND = SERVICE_PREFIX + "SendMessage"

_RESPONSES_TAG = b"\x0a"  # field 1, wire type 2 (length-delimited)
ITEM_RESPONSE = b"R"
ITEM_DELIVERY = b"D"
_DELIVERY_HEAD = struct.Struct(">cIqH")  # kind, delivery_attempt, invisible_ms, len(topic)
_LENGTH = struct.Struct(">H")

DELIVERIES_TO_FRONT: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "deliveries_to_front", default=False
)
"""True while :class:`FrontBatching` collects a ``ReceiveMessage`` answer for popfront."""


@per_message
class FrontDelivery:
    """A popped message that popfront turns into the client's ``Message``.

    Stands where the servicer would yield a ``ReceiveMessageResponse`` with that
    message, and answers ``HasField`` as that response would (call counting asks it).
    """

    delivered: DeliveredMessage
    namespace: str
    store_host: str

    def HasField(self, name: str) -> bool:  # noqa: N802 - the protobuf message's spelling
        return name == "message"


def encode_delivery(delivery: FrontDelivery) -> bytes:
    """A ``D`` item: ``'D'``, u32 delivery attempt, i64 invisible ms, then topic,
    namespace, store host and receipt handle each as u16 length + UTF-8, then the
    commit-log record (big-endian; ``broker_image/front/delivery.go`` reads it)."""
    delivered = delivery.delivered
    topic = delivered.topic.encode()
    namespace = delivery.namespace.encode()
    host = delivery.store_host.encode()
    handle = delivered.receipt_handle.encode()
    return b"".join(
        (
            _DELIVERY_HEAD.pack(
                ITEM_DELIVERY, delivered.delivery_attempt, delivered.invisible_ms, len(topic)
            ),
            topic,
            _LENGTH.pack(len(namespace)),
            namespace,
            _LENGTH.pack(len(host)),
            host,
            _LENGTH.pack(len(handle)),
            handle,
            delivered.stored.record,
        )
    )


def encode_batch(serialized: Sequence[bytes]) -> bytes:
    """A ``ReceiveBatch`` of ``serialized`` items (see the module docstring).

    The message has one repeated ``bytes`` field, so its encoding is each
    element as tag 1, varint length, bytes. Written here rather than generated:
    the Python side never reads a ``ReceiveBatch``, and the items arrive
    already encoded.
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
    """Serves ``FRONT_RECEIVE`` as the collected v2 ``ReceiveMessage`` (module docstring),
    and ``FRONT_SEND`` as the v2 ``SendMessage`` of a
    :class:`~popbroker.grpc.frontappends.FrontSend` (that module's docstring)."""

    async def intercept_service(
        self,
        continuation: Callable[[Any], Awaitable[Any]],
        handler_call_details: Any,
    ) -> Any:
        method = handler_call_details.method
        if method not in (FRONT_RECEIVE, frontappends.FRONT_SEND):
            return await continuation(handler_call_details)
        # grpc.aio's continuation accepts only its own details type (a Cython class
        # built from method and metadata), so the renamed details are one of those.
        v2_method = V2_RECEIVE if method == FRONT_RECEIVE else V2_SEND
        details = type(handler_call_details)(v2_method, handler_call_details.invocation_metadata)
        handler = await continuation(details)
        if method == frontappends.FRONT_SEND:
            if handler is None or handler.unary_unary is None:
                return None
            return grpc.unary_unary_rpc_method_handler(
                handler.unary_unary,
                request_deserializer=frontappends.FrontSend.parse,
                response_serializer=handler.response_serializer,
            )
        if handler is None or handler.unary_stream is None:
            return None
        streaming = handler.unary_stream
        serialize = handler.response_serializer

        def item(response: Any) -> bytes:
            if isinstance(response, FrontDelivery):
                return encode_delivery(response)
            return ITEM_RESPONSE + bytes(serialize(response))

        async def batched(request: Any, context: Any) -> list[bytes]:
            token = DELIVERIES_TO_FRONT.set(True)
            try:
                return [item(response) async for response in streaming(request, context)]
            finally:
                DELIVERIES_TO_FRONT.reset(token)

        return grpc.unary_unary_rpc_method_handler(
            batched,
            request_deserializer=handler.request_deserializer,
            response_serializer=encode_batch,
        )
