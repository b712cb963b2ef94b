"""NATS JetStream adapter (``nats-py``): file-backed stream, durable pull consumer.

* Stream ``<TOPIC>`` on subject ``<topic>``, ``storage=file`` (JetStream's file
  store writes every message to its block files; fsync is periodic, like the
  others' async modes), limits retention, defaults otherwise.
* ``send``: one ``publish_async`` per message for the batch, then wait for every
  PubAck (the stream has stored the message): one batch = one wait, like a
  32-message SendMessage.
* ``receive``: ``fetch(batch=32, timeout=wait_s)`` on a durable pull consumer named
  after the group, explicit acks, ``ack_wait`` = the spec's invisible time,
  unlimited deliveries, ``max_ack_pending`` 65536 (the default 1000 would cap 4
  consumers' in-flight batches).
* ``ack``: ``msg.ack()`` per message (JetStream acks are fire-and-forget
  publishes), then one ``flush`` -- a PING/PONG round trip, after which the server
  has processed every ack -- so a batch's acks cost one round trip, as one
  AckMessage RPC or one XACK does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.peers.workload import Delivered, Spec, requirement

nats = requirement("nats")
js_api = requirement("nats.js.api")

MAX_ACK_PENDING = 65536


def stream_name(topic: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in topic).upper()


class NatsAdapter:
    def __init__(self, spec: Spec) -> None:
        self._spec = spec
        self._nc: Any = None
        self._js: Any = None
        self._sub: Any = None

    async def connect(self) -> None:
        self._nc = await nats.connect(
            f"nats://{self._spec.endpoint}",
            connect_timeout=5,
            allow_reconnect=False,
            max_reconnect_attempts=0,
        )
        self._js = self._nc.jetstream(timeout=10)
        await self._js.add_stream(
            js_api.StreamConfig(
                name=stream_name(self._spec.topic),
                subjects=[self._spec.topic],
                storage=js_api.StorageType.FILE,
            )
        )

    async def _subscription(self) -> Any:
        if self._sub is None:
            self._sub = await self._js.pull_subscribe(
                self._spec.topic,
                durable=self._spec.group,
                stream=stream_name(self._spec.topic),
                config=js_api.ConsumerConfig(
                    ack_policy=js_api.AckPolicy.EXPLICIT,
                    ack_wait=self._spec.invisible_s,
                    max_deliver=-1,
                    max_ack_pending=MAX_ACK_PENDING,
                ),
            )
        return self._sub

    async def send(self, bodies: Sequence[bytes]) -> None:
        futures = [await self._js.publish_async(self._spec.topic, data) for data in bodies]
        for future in futures:
            await future

    async def receive(self, *, max_count: int, wait_s: float) -> list[Delivered]:
        sub = await self._subscription()
        try:
            msgs = await sub.fetch(batch=max_count, timeout=wait_s)
        except TimeoutError:  # nats.errors.TimeoutError, or asyncio's from a drained fetch
            return []
        return [Delivered(bytes(m.data), m, int(m.metadata.num_delivered)) for m in msgs]

    async def ack(self, delivered: Sequence[Delivered]) -> None:
        for item in delivered:
            await item.token.ack()
        await self._nc.flush(timeout=10)

    async def close(self) -> None:
        if self._nc is not None:
            await self._nc.close()


def make(spec: Spec) -> NatsAdapter:
    return NatsAdapter(spec)
