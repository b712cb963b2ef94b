"""``frames._Outbox``: the answers of calls that finish in the same pass of the event loop
go to the socket in one write, in the order they finished; none after the connection
closes."""

from __future__ import annotations

import asyncio
from typing import cast

from popbroker.store.wire import frames


class Writer:
    """The part of ``asyncio.StreamWriter`` the outbox uses, recording each write."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closing = False
        self.drains = 0

    def is_closing(self) -> bool:
        return self.closing

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    async def drain(self) -> None:
        self.drains += 1


def outbox_for(writer: Writer) -> frames._Outbox:
    return frames._Outbox(cast(asyncio.StreamWriter, writer))


async def test_answers_of_one_pass_go_in_one_write_and_later_ones_in_the_next() -> None:
    writer = Writer()
    outbox = outbox_for(writer)
    await asyncio.gather(outbox.send(b"a1"), outbox.send(b"b22"), outbox.send(b"c333"))
    assert writer.writes == [b"a1b22c333"]
    assert writer.drains == 3  # each answer still waits for back-pressure
    await outbox.send(b"d4")
    await asyncio.sleep(0)  # the pass after: the flush scheduled by that send runs
    assert writer.writes == [b"a1b22c333", b"d4"]


async def test_nothing_is_written_once_the_connection_closes() -> None:
    writer = Writer()
    outbox = outbox_for(writer)
    await outbox.send(b"queued before the close")
    writer.closing = True
    await asyncio.sleep(0)
    await outbox.send(b"after the close")
    await asyncio.sleep(0)
    assert writer.writes == []
