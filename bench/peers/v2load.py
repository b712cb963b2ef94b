"""Our batching load generator for ``apache.rocketmq.v2.MessagingService`` (popfleet's endpoint).

The official Python client sends one message per SendMessage and acks one
message per AckMessage, so it measures the client more than the broker. This
adapter speaks the same protocol with the generated modules the official
package ships (``rocketmq.grpc_protocol``), but batches as the protocol allows:

* ``connect``: QueryRoute for the topic (the route's first queue, with its broker,
  is what every ReceiveMessage names, as the official SimpleConsumer does); a
  ``grpc.aio`` channel to 127.0.0.1 only; the metadata the official client sends
  (client id, language, protocol, version, date, request id).
* ``send``: one SendMessage with up to 32 messages (NORMAL, IDENTITY encoding, a
  unique 34-hex-digit message id each); every entry must come back OK.
* ``receive``: ReceiveMessage with ``batch_size`` 32, the spec's invisible time,
  long polling ``wait_s``, ``auto_renew`` false; the stream is read to its end.
* ``ack``: one AckMessage with an entry per message; OK or MULTIPLE_RESULTS with
  every entry OK.

Before anything of the official package is imported, its local-IP probe (a UDP
connect to a public address) is pre-seeded with 127.0.0.1, so nothing here ever
touches a non-loopback address.
"""

from __future__ import annotations

import itertools
import os
import time
import uuid
from collections.abc import Sequence
from typing import Any

from rocketmq.v5.util.misc import Misc

Misc._Misc__LOCAL_IP = "127.0.0.1"

import grpc  # noqa: E402 - after the probe is seeded
from google.protobuf.duration_pb2 import Duration  # noqa: E402
from google.protobuf.timestamp_pb2 import Timestamp  # noqa: E402
from rocketmq.grpc_protocol import (  # noqa: E402
    definition_pb2,
    service_pb2,
    service_pb2_grpc,
)

from bench.peers.procs import HOST  # noqa: E402
from bench.peers.workload import Delivered, Spec  # noqa: E402

CLIENT_VERSION = "5.1.2"
RPC_TIMEOUT_S = 10.0
_OK = (definition_pb2.OK, definition_pb2.MULTIPLE_RESULTS)
_ids = itertools.count()


class V2Error(RuntimeError):
    """A v2 call answered a status other than OK."""


def message_id() -> str:
    """34 upper-case hex digits like the official client's, unique per process."""
    return f"01{os.getpid() & 0xFFFFFFFFFFFF:012X}{next(_ids):020X}"


def duration(seconds: float) -> Duration:
    whole = int(seconds)
    return Duration(seconds=whole, nanos=int((seconds - whole) * 1e9))


def _check(status: Any, rpc: str) -> None:
    if status.code not in _OK:
        raise V2Error(f"{rpc}: {status.code} {status.message}")


class V2Adapter:
    def __init__(self, spec: Spec) -> None:
        self._spec = spec
        self._channel: Any = None
        self._stub: Any = None
        self._queue: Any = None
        self._client_id = f"popfleet-bench@{os.getpid()}@{spec.consumer}@{time.time_ns():x}"

    def _metadata(self) -> tuple[tuple[str, str], ...]:
        return (
            ("x-mq-client-id", self._client_id),
            ("x-mq-language", "PYTHON"),
            ("x-mq-protocol", "GRPC_V2"),
            ("x-mq-client-version", CLIENT_VERSION),
            ("x-mq-date-time", time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())),
            ("x-mq-request-id", str(uuid.uuid4())),
            ("x-mq-namespace", ""),
        )

    async def connect(self) -> None:
        host, port = self._spec.endpoint.rsplit(":", 1)
        if host != HOST:
            raise ValueError(f"v2load talks to {HOST} only, not {host}")
        self._channel = grpc.aio.insecure_channel(self._spec.endpoint)
        self._stub = service_pb2_grpc.MessagingServiceStub(self._channel)
        endpoints = definition_pb2.Endpoints(
            scheme=definition_pb2.IPv4,
            addresses=[definition_pb2.Address(host=host, port=int(port))],
        )
        route = await self._stub.QueryRoute(
            service_pb2.QueryRouteRequest(
                topic=definition_pb2.Resource(name=self._spec.topic), endpoints=endpoints
            ),
            metadata=self._metadata(),
            timeout=RPC_TIMEOUT_S,
        )
        _check(route.status, "QueryRoute")
        if not route.message_queues:
            raise V2Error(f"QueryRoute: no queue for {self._spec.topic}")
        self._queue = route.message_queues[0]

    async def send(self, bodies: Sequence[bytes]) -> None:
        topic = definition_pb2.Resource(name=self._spec.topic)
        born = Timestamp()
        born.GetCurrentTime()
        messages = [
            definition_pb2.Message(
                topic=topic,
                body=data,
                system_properties=definition_pb2.SystemProperties(
                    message_id=message_id(),
                    message_type=definition_pb2.NORMAL,
                    body_encoding=definition_pb2.IDENTITY,
                    born_timestamp=born,
                    born_host=HOST,
                ),
            )
            for data in bodies
        ]
        reply = await self._stub.SendMessage(
            service_pb2.SendMessageRequest(messages=messages),
            metadata=self._metadata(),
            timeout=RPC_TIMEOUT_S,
        )
        _check(reply.status, "SendMessage")
        for entry in reply.entries:
            _check(entry.status, "SendMessage entry")
        if len(reply.entries) != len(messages):
            raise V2Error(f"SendMessage: {len(reply.entries)} entries for {len(messages)}")

    async def receive(self, *, max_count: int, wait_s: float) -> list[Delivered]:
        request = service_pb2.ReceiveMessageRequest(
            group=definition_pb2.Resource(name=self._spec.group),
            message_queue=self._queue,
            filter_expression=definition_pb2.FilterExpression(
                type=definition_pb2.TAG, expression="*"
            ),
            batch_size=max_count,
            invisible_duration=duration(self._spec.invisible_s),
            long_polling_timeout=duration(wait_s),
            auto_renew=False,
        )
        call = self._stub.ReceiveMessage(
            request, metadata=self._metadata(), timeout=wait_s + RPC_TIMEOUT_S
        )
        out: list[Delivered] = []
        async for reply in call:
            kind = reply.WhichOneof("content")
            if kind == "status":
                if reply.status.code not in (*_OK, definition_pb2.MESSAGE_NOT_FOUND):
                    raise V2Error(f"ReceiveMessage: {reply.status.code} {reply.status.message}")
            elif kind == "message":
                props = reply.message.system_properties
                out.append(
                    Delivered(
                        bytes(reply.message.body),
                        (props.message_id, props.receipt_handle),
                        int(props.delivery_attempt) or 1,
                    )
                )
        return out

    async def ack(self, delivered: Sequence[Delivered]) -> None:
        reply = await self._stub.AckMessage(
            service_pb2.AckMessageRequest(
                group=definition_pb2.Resource(name=self._spec.group),
                topic=definition_pb2.Resource(name=self._spec.topic),
                entries=[
                    service_pb2.AckMessageEntry(message_id=mid, receipt_handle=handle)
                    for mid, handle in (d.token for d in delivered)
                ],
            ),
            metadata=self._metadata(),
            timeout=RPC_TIMEOUT_S,
        )
        _check(reply.status, "AckMessage")
        for entry in reply.entries:
            _check(entry.status, "AckMessage entry")

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()


def make(spec: Spec) -> V2Adapter:
    return V2Adapter(spec)
