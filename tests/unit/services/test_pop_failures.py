"""A pop that fails half-way (a store error, a client giving up) leaves no checkpoint unresolved."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

import pytest

from popbroker.services.popping import Popper, PopRequest
from popbroker.store.api import ReadResult, StoreApi
from popbroker.store.errors import StoreFull
from tests.unit.services.conftest import GROUP, TOPIC, Broker


class _SecondReadFails:
    """Delegates to a store; the second ``read`` raises (or blocks until cancelled)."""

    def __init__(self, inner: StoreApi, *, block: bool = False) -> None:
        self.inner = inner
        self.block = block
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def read(self, *args: Any, **kwargs: Any) -> ReadResult:
        self.reads += 1
        if self.reads == 2:
            if self.block:
                await asyncio.Event().wait()
            raise StoreFull("disk full")
        return await self.inner.read(*args, **kwargs)


async def _until(predicate: Callable[[], bool], *, timeout_s: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.001)


def _request() -> PopRequest:
    # 2 s invisible: too short to buffer, so each checkpoint is written at once (WRITE_NOW)
    return PopRequest(
        group=GROUP, topic=TOPIC, queue_id=-1, read_queue_num=2, max_messages=32, invisible_ms=2_000
    )


async def _assert_checkpoints_resolved(broker: Broker) -> None:
    stats = broker.popack.state.buffer.stats()
    assert stats.writing == 0
    assert stats.in_memory == 0
    await broker.flush()
    committed = [
        await broker.store.committed_offset(group=GROUP, topic=TOPIC, queue_id=q) for q in (0, 1)
    ]
    assert sorted(c for c in committed if c is not None)[-1] == 1  # the popped batch passed


@pytest.mark.parametrize("block", [False, True], ids=["store-error", "cancelled"])
async def test_a_failed_pop_still_writes_its_checkpoints(broker: Broker, block: bool) -> None:
    await broker.send(b"a")
    await broker.send(b"b")  # one message in each queue
    store = _SecondReadFails(broker.store, block=block)
    popper = Popper(
        store=cast(StoreApi, store), state=broker.popack.state, settings=broker.popack.settings
    )
    if block:
        task = asyncio.create_task(popper.pop(_request()))
        await _until(lambda: store.reads >= 2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # the shielded write finishes after the cancellation
        await _until(lambda: broker.popack.state.buffer.stats().writing == 0)
    else:
        with pytest.raises(StoreFull):
            await popper.pop(_request())
    await _assert_checkpoints_resolved(broker)
