"""Counting v2 calls and messages at the edge (a ``grpc.aio`` server interceptor).

The outermost interceptor of the endpoint: it sees every answer, refusals of
:mod:`popbroker.grpc.authguard` included, and counts into
:class:`~popbroker.metrics.popack.PopackMetrics` — the top status of each call,
and per message: send and ack entries with their codes, change-invisible and
DLQ forwards per call, popped and pulled messages as they stream out. The
services are untouched; the cost is a few dictionary lookups per call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from popbroker.grpc import handlers
from popbroker.grpc.protocol import Code
from popbroker.metrics.popack import PopackMetrics

_ENTRY_OPS = {"SendMessage": "send", "AckMessage": "ack"}
_CALL_OPS = {
    "ChangeInvisibleDuration": "change_invisible",
    "ForwardMessageToDeadLetterQueue": "forward_dlq",
}
_STREAM_OPS = {"ReceiveMessage": "pop", "PullMessage": "pull"}


def code_name(code: int) -> str:
    try:
        return str(Code.Name(code))
    except ValueError:
        return str(code)


class CallCounter(handlers.MessagingInterceptor):
    """Count every ``MessagingService`` answer (module docstring)."""

    def __init__(self, metrics: PopackMetrics) -> None:
        self._metrics = metrics
        # Labelled children by (rpc or op, code): ``labels()`` takes a lock on every call.
        self._requests: dict[tuple[str, int], Any] = {}
        self._messages: dict[tuple[str, int], Any] = {}

    def _request(self, rpc: str, code: int) -> Any:
        child = self._requests.get((rpc, code))
        if child is None:
            child = self._requests[(rpc, code)] = self._metrics.requests.labels(
                rpc, code_name(code)
            )
        return child

    def _message(self, op: str, code: int) -> Any:
        child = self._messages.get((op, code))
        if child is None:
            child = self._messages[(op, code)] = self._metrics.messages.labels(op, code_name(code))
        return child

    def _unary_done(self, rpc: str, response: Any) -> None:
        code = response.status.code
        self._request(rpc, code).inc()
        if rpc in _ENTRY_OPS:
            for entry in response.entries:
                self._message(_ENTRY_OPS[rpc], entry.status.code).inc()
        elif rpc in _CALL_OPS:
            self._message(_CALL_OPS[rpc], code).inc()

    def wrap_rpc(self, handler: Any, rpc: str, handler_call_details: Any) -> Any:

        def unary(behaviour: handlers.Unary) -> handlers.Unary:
            async def counted(request: Any, context: Any) -> Any:
                response = await behaviour(request, context)
                self._unary_done(rpc, response)
                return response

            return counted

        def streaming(behaviour: handlers.Streaming) -> handlers.Streaming:
            async def counted(request: Any, context: Any) -> AsyncIterator[Any]:
                delivered = 0
                status: int | None = None
                async for response in behaviour(request, context):
                    if response.HasField("status") and status is None:
                        status = response.status.code
                    elif rpc in _STREAM_OPS and response.HasField("message"):
                        delivered += 1
                    yield response
                self._stream_done(rpc, status, delivered)

            return counted

        return handlers.wrap(handler, unary=unary, streaming=streaming)

    def _stream_done(self, rpc: str, status: int | None, delivered: int) -> None:
        if rpc == "Telemetry":
            return  # a long-lived stream of settings, not a request
        self._request(rpc, status or Code.OK).inc()
        if delivered and rpc in _STREAM_OPS:
            self._message(_STREAM_OPS[rpc], Code.OK).inc(delivered)
