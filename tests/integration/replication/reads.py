"""What a replica holds, read through the store API: the message keys of topic ``orders``."""

from __future__ import annotations

from typing import Protocol

from popbroker.store.api import ReadResult


class Readable(Protocol):
    async def read(
        self, topic: str, queue_id: int, queue_offset: int, *, max_count: int
    ) -> ReadResult: ...


async def keys(store: Readable, queues: int = 2) -> set[str]:
    """Every ``UNIQ_KEY`` in the queues of topic ``orders``."""
    found: set[str] = set()
    for queue_id in range(queues):
        offset = 0
        while True:
            read = await store.read("orders", queue_id, offset, max_count=32)
            if not read.messages:
                break
            found |= {m.properties["UNIQ_KEY"] for m in read.messages}
            offset = read.messages[-1].queue_offset + 1
    return found
