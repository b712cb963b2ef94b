"""Wrapping ``MessagingService`` method handlers in server interceptors.

``grpc.aio`` interceptors see the method name and metadata, not the request;
to act on requests and responses they return a copy of the method handler
whose behaviour is wrapped. :func:`wrap` does that for the three shapes the
v2 service has (unary, server-streaming, bidi), and :func:`response_type` gives
the response message a refusal is answered with (status in the body, fact
sheet §6). :class:`MessagingInterceptor` is the common part of such
interceptors: other services (``grpc.health.v1``) pass through untouched.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from popbroker.grpc.protocol import service

SERVICE_PREFIX = "/apache.rocketmq.v2.MessagingService/"

Unary = Callable[[Any, Any], Awaitable[Any]]
Streaming = Callable[[Any, Any], AsyncIterator[Any]]


def rpc_name(method: str) -> str | None:
    """``SendMessage`` for ``/apache.rocketmq.v2.MessagingService/SendMessage``, else None."""
    if not method.startswith(SERVICE_PREFIX):
        return None
    return method[len(SERVICE_PREFIX) :]


def response_type(rpc: str) -> Any:
    """The response message class of ``rpc``."""
    if rpc == "Telemetry":
        return service.TelemetryCommand
    return getattr(service, f"{rpc}Response")


def wrap(
    handler: Any,
    *,
    unary: Callable[[Unary], Unary],
    streaming: Callable[[Streaming], Streaming],
) -> Any:
    """``handler`` with its behaviour passed through ``unary`` or ``streaming``.

    Server-streaming and bidi behaviours both go through ``streaming`` (for bidi
    the first argument is the request iterator).
    """
    if handler.unary_unary is not None:
        return handler._replace(unary_unary=unary(handler.unary_unary))
    if handler.unary_stream is not None:
        return handler._replace(unary_stream=streaming(handler.unary_stream))
    if handler.stream_stream is not None:
        return handler._replace(stream_stream=streaming(handler.stream_stream))
    return handler  # client streaming: the v2 service has none


class MessagingInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """An interceptor of ``MessagingService`` calls only; subclasses wrap the handler."""

    def wrap_rpc(self, handler: Any, rpc: str, handler_call_details: Any) -> Any:
        raise NotImplementedError

    async def intercept_service(
        self,
        continuation: Callable[[Any], Awaitable[Any]],
        handler_call_details: Any,
    ) -> Any:
        handler = await continuation(handler_call_details)
        rpc = rpc_name(handler_call_details.method)
        if handler is None or rpc is None:
            return handler
        return self.wrap_rpc(handler, rpc, handler_call_details)
