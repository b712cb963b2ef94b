"""``ArrivalStream``: the client end of ``Store.Arrivals``, reconnecting.

``RemoteStore.arrivals()`` returns one. Its contract, in order:

1. It subscribes at once: a background task opens the stream when the stream
   object is made, and the server's first (empty) message confirms that the
   store has registered the listener. Until then ``RemoteStore`` holds back its
   other calls (bounded by their deadline), so an ``append`` made after
   ``arrivals()`` is always announced, as with the in-process store.
2. Arrivals are queued in a bounded buffer; when the reader is slow the task
   stops reading and gRPC flow control pushes back to the store, which drops
   announcements (they are hints for long polling, never data).
3. When the stream breaks with a retriable status (store restart, socket gone)
   the task reopens it after ``initial_backoff_s``, doubling up to
   ``max_backoff_s``, reset once a stream is confirmed. Arrivals in the gap are
   not replayed.
4. A non-retriable status is raised from ``__anext__``; ``aclose()`` or the
   client's ``close()`` ends the iteration with ``StopAsyncIteration``.

Cancelling a reader's ``__anext__`` (``asyncio.wait_for(anext(stream), t)``) is
harmless: it only cancels a queue ``get``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import grpc

from popbroker.store import api, errors
from popbroker.store.wire import convert
from popbroker.store.wire import store_pb2 as pb

if TYPE_CHECKING:
    from popbroker.store.wire.store_pb2_grpc import StoreAsyncStub

log = logging.getLogger(__name__)

BUFFER: Final = 8192


class _End:
    """Queued once when the stream is over."""


_END: Final = _End()


class ArrivalStream:
    """An ``AsyncIterator[api.Arrival]`` over a reconnecting ``Arrivals`` call."""

    def __init__(
        self,
        stub: StoreAsyncStub,
        *,
        topic: str | None = None,
        target: str,
        to_store_error: Callable[[grpc.aio.AioRpcError], errors.StoreError],
        initial_backoff_s: float,
        max_backoff_s: float,
    ) -> None:
        self._stub = stub
        self._request = pb.ArrivalsRequest(topic=topic or "")
        self._target = target
        self._to_store_error = to_store_error
        self._initial_backoff_s = initial_backoff_s
        self._max_backoff_s = max_backoff_s
        self._queue: asyncio.Queue[api.Arrival | errors.StoreError | _End] = asyncio.Queue(BUFFER)
        self._settled = asyncio.Event()  # the first subscription is confirmed, or failed
        self._closed = False
        self._task = asyncio.create_task(self._run(), name=f"store arrivals from {target}")

    def __aiter__(self) -> ArrivalStream:
        return self

    async def __anext__(self) -> api.Arrival:
        if self._closed and self._queue.empty():
            raise StopAsyncIteration
        item = await self._queue.get()
        if isinstance(item, _End):
            self._closed = True
            raise StopAsyncIteration
        if isinstance(item, errors.StoreError):
            self._closed = True
            raise item
        return item

    async def settled(self) -> None:
        """Return once the first subscription is confirmed or has failed."""
        await self._settled.wait()

    @property
    def is_settled(self) -> bool:
        return self._settled.is_set()

    @property
    def is_closed(self) -> bool:
        return self._closed or self._task.done()

    async def aclose(self) -> None:
        """Stop the stream; a reader waiting in ``__anext__`` gets ``StopAsyncIteration``."""
        self._closed = True
        self._settled.set()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait(_END)

    async def _run(self) -> None:
        delay_s = self._initial_backoff_s
        while True:
            failure = await self._stream_once()
            if failure is None:  # a confirmed stream delivered, then broke
                delay_s = self._initial_backoff_s
                continue
            if not failure.retriable:
                self._settled.set()
                await self._queue.put(failure)
                return
            log.info(
                "store wire: arrivals from %s broke (%s); reconnecting in %.2fs",
                self._target,
                failure,
                delay_s,
            )
            await asyncio.sleep(delay_s)
            delay_s = min(delay_s * 2, self._max_backoff_s)

    async def _stream_once(self) -> errors.StoreError | None:
        """Run one call; ``None`` when it was confirmed before it broke (reconnect at once)."""
        call = self._stub.Arrivals(self._request, wait_for_ready=True)
        confirmed = False
        try:
            async for response in call:
                if not confirmed:
                    confirmed = True
                    self._settled.set()
                for arrival in response.arrivals:
                    await self._queue.put(convert.arrival_from_pb(arrival))
            failure: errors.StoreError = errors.StoreClosed("the arrival stream ended")
        except grpc.aio.AioRpcError as exc:
            failure = self._to_store_error(exc)
        finally:
            call.cancel()
        self._settled.set()  # a first attempt that failed holds nobody back
        if confirmed and failure.retriable:
            log.info("store wire: arrivals from %s broke (%s)", self._target, failure)
            return None
        return failure
