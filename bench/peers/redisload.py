"""Redis Streams adapter (``redis`` asyncio client): XADD / XREADGROUP / XACK / XAUTOCLAIM.

* ``send``: a non-transactional pipeline of one ``XADD <topic> * b <body>`` per
  message: one round trip per batch. The server runs with AOF ``everysec``.
* ``receive``: ``XREADGROUP GROUP <group> <consumer> COUNT 32 BLOCK <ms> STREAMS
  <topic> >`` (the group is created at id 0 with MKSTREAM on connect).
* ``ack``: one ``XACK <topic> <group> id...`` for the batch.
* Redelivery: Redis has no invisible-time timer; a consumer has to claim entries
  that stayed pending too long. With ``reclaim_poll_s`` set, each ``receive`` first
  runs ``XAUTOCLAIM <topic> <group> <consumer> <invisible ms> 0-0 COUNT 32``, then a
  non-blocking XREADGROUP, and when both are empty sleeps ``reclaim_poll_s`` on the
  client (not ``BLOCK``: Redis resolves blocking timeouts on its 10 Hz cron, which
  would make every poll ~100 ms). A message so comes back within about one poll
  interval after its idle time passed: Redis' figure is set by the client's
  polling, which the report says next to it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from bench.peers.procs import HOST
from bench.peers.workload import Delivered, Spec, requirement

redis_asyncio = requirement("redis.asyncio")
redis_exceptions = requirement("redis.exceptions")

FIELD = b"b"


class RedisAdapter:
    def __init__(self, spec: Spec) -> None:
        self._spec = spec
        self._r: Any = None

    async def connect(self) -> None:
        port = int(self._spec.endpoint.rsplit(":", 1)[1])
        self._r = redis_asyncio.Redis(host=HOST, port=port, socket_connect_timeout=5)
        await self._r.ping()
        try:
            await self._r.xgroup_create(self._spec.topic, self._spec.group, id="0", mkstream=True)
        except redis_exceptions.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def send(self, bodies: Sequence[bytes]) -> None:
        pipe = self._r.pipeline(transaction=False)
        for data in bodies:
            pipe.xadd(self._spec.topic, {FIELD: data})
        await pipe.execute()

    async def receive(self, *, max_count: int, wait_s: float) -> list[Delivered]:
        spec = self._spec
        if spec.reclaim_poll_s > 0:
            _next, claimed, *_ = await self._r.xautoclaim(
                spec.topic,
                spec.group,
                spec.consumer,
                min_idle_time=int(spec.invisible_s * 1000),
                start_id="0-0",
                count=max_count,
            )
            if claimed:
                return [Delivered(fields[FIELD], entry_id, 2) for entry_id, fields in claimed]
            answer = await self._r.xreadgroup(
                spec.group, spec.consumer, {spec.topic: ">"}, count=max_count
            )
            if not answer:
                await asyncio.sleep(min(wait_s, spec.reclaim_poll_s))
        else:
            answer = await self._r.xreadgroup(
                spec.group,
                spec.consumer,
                {spec.topic: ">"},
                count=max_count,
                block=max(1, int(wait_s * 1000)),
            )
        return [
            Delivered(fields[FIELD], entry_id, 1)
            for _stream, entries in answer or []
            for entry_id, fields in entries
        ]

    async def ack(self, delivered: Sequence[Delivered]) -> None:
        await self._r.xack(self._spec.topic, self._spec.group, *(d.token for d in delivered))

    async def close(self) -> None:
        if self._r is not None:
            await self._r.aclose()


def make(spec: Spec) -> RedisAdapter:
    return RedisAdapter(spec)
