"""A current event loop on the calling thread, for tests that drive the official client.

The official RocketMQ client calls ``asyncio.get_event_loop()`` on the caller's thread while
it opens its Telemetry stream; after an async test, pytest-asyncio leaves the main thread
with no current loop, and the client's startup then fails at random, by test order.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def current_event_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """A new loop set as this thread's current one, closed and unset afterwards."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        yield loop
    finally:
        asyncio.set_event_loop(None)
        loop.close()
