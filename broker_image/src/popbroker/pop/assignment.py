"""Broker-side assignment: which queues a client of a group should consume.

Purpose: answer ``QueryAssignment`` for push consumers (DESIGN §3.3, fact
sheet §5). Queues are :class:`MessageQueue` ``(broker_name, queue_id)`` pairs
across every broker of the topic; ``queue_id == -1`` means "pop all queues of
that broker".

Algorithms:

  * **PULL** — classic averaged exclusive assignment. Sort the queues and the
    live client ids; with ``q`` queues and ``c`` clients, client *i* gets the
    contiguous block ``[start_i, start_i + size_i)`` where every client gets
    ``q // c`` queues and the first ``q % c`` clients one more. Each queue has
    exactly one consumer; when ``c > q`` the clients past ``q`` get nothing.
  * **POP** — ``allocate4Pop`` with share number ``n = pop_share_queue_num``:

      1. If ``n <= 0`` or ``n >= c - 1``: every client gets queue -1 on every
         broker (all queues, shared by all clients).
      2. Else if ``c <= q``: the client gets its own PULL share plus the PULL
         shares of the next ``n`` clients in the sorted ring, so each queue is
         shared by exactly ``n + 1`` clients.
      3. Else (more clients than queues): the client gets the single queue
         ``queues[i % q]`` — every client still gets one queue.

Bounded work (upstream #3521, an OOM from looping ``popShareQueueNum``
times): step 2 runs only when ``n < c - 1`` and each share is computed in
O(1) then sliced, so a call costs O((q + c) log(q + c)) for sorting whatever
``n`` is — ``n = 10**6`` takes step 1 at once.

A client id that is not among the live clients gets nothing (it has not sent
a heartbeat yet, or has just terminated).

Callers: the popack services' ``QueryAssignment`` handler, with the group's
mode and ``popShareQueueNum`` from the store's config.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import NamedTuple

ALL_QUEUES = -1


class ConsumeMode(enum.Enum):
    """Per (group, topic) consume mode (``mqadmin setConsumeMode``)."""

    PULL = "PULL"
    POP = "POP"


class MessageQueue(NamedTuple):
    """One queue of the topic on one broker; ``queue_id == -1`` means all queues there."""

    broker_name: str
    queue_id: int


def assign(
    client_id: str,
    *,
    queues: Iterable[MessageQueue],
    client_ids: Iterable[str],
    mode: ConsumeMode,
    pop_share_queue_num: int = 0,
) -> tuple[MessageQueue, ...]:
    """The queues ``client_id`` should consume under ``mode`` (see the module docstring)."""
    if mode is ConsumeMode.POP:
        return allocate_pop(
            client_id, queues=queues, client_ids=client_ids, pop_share_queue_num=pop_share_queue_num
        )
    return allocate_pull(client_id, queues=queues, client_ids=client_ids)


def allocate_pull(
    client_id: str, *, queues: Iterable[MessageQueue], client_ids: Iterable[str]
) -> tuple[MessageQueue, ...]:
    """Averaged exclusive assignment: each queue to exactly one live client."""
    sorted_queues = sorted(set(queues))
    sorted_clients = sorted(set(client_ids))
    index = _index_of(client_id, sorted_clients)
    if index is None or not sorted_queues:
        return ()
    start, size = _share(index, queue_count=len(sorted_queues), client_count=len(sorted_clients))
    return tuple(sorted_queues[start : start + size])


def allocate_pop(
    client_id: str,
    *,
    queues: Iterable[MessageQueue],
    client_ids: Iterable[str],
    pop_share_queue_num: int,
) -> tuple[MessageQueue, ...]:
    """``allocate4Pop``: each queue shared by ``pop_share_queue_num + 1`` clients."""
    sorted_queues = sorted(set(queues))
    sorted_clients = sorted(set(client_ids))
    index = _index_of(client_id, sorted_clients)
    if index is None or not sorted_queues:
        return ()
    client_count = len(sorted_clients)
    queue_count = len(sorted_queues)
    if pop_share_queue_num <= 0 or pop_share_queue_num >= client_count - 1:
        brokers = sorted({queue.broker_name for queue in sorted_queues})
        return tuple(MessageQueue(broker_name, ALL_QUEUES) for broker_name in brokers)
    if client_count > queue_count:
        return (sorted_queues[index % queue_count],)
    assigned: list[MessageQueue] = []
    for step in range(pop_share_queue_num + 1):  # < client_count iterations, shares disjoint
        start, size = _share(
            (index + step) % client_count, queue_count=queue_count, client_count=client_count
        )
        assigned.extend(sorted_queues[start : start + size])
    return tuple(sorted(assigned))


def _index_of(client_id: str, sorted_clients: list[str]) -> int | None:
    try:
        return sorted_clients.index(client_id)
    except ValueError:
        return None


def _share(index: int, *, queue_count: int, client_count: int) -> tuple[int, int]:
    """Start and size of client ``index``'s contiguous PULL block."""
    base, extra = divmod(queue_count, client_count)
    if index < extra:
        return index * (base + 1), base + 1
    return extra * (base + 1) + (index - extra) * base, base
