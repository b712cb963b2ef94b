"""Metrics of the popack role (the v2 endpoint).

Counted as calls complete (by :mod:`popbroker.grpc.observing`, at the edge;
``code`` is the v2 status name, e.g. ``OK``, ``UNAUTHORIZED``,
``INVALID_RECEIPT_HANDLE``):

  * ``popfleet_broker_requests_total{rpc,code}`` — every v2 call by its top status.
  * ``popfleet_broker_messages_total{op,code}`` — messages: ``send`` and ``ack``
    per entry and its status, ``change_invisible`` and ``forward_dlq`` per
    call, ``pop`` and ``pull`` per delivered message (code ``OK``).

Read at scrape time (:meth:`PopackMetrics.refresh`):

  * ``popfleet_broker_parked_long_polls`` — receives/pulls waiting for messages.
  * ``popfleet_broker_checkpoint_buffer{state}`` — checkpoints in popack memory
    (``in_memory``, ``writing``) and queued offset commits (``commit_entries``).
  * ``popfleet_broker_inflight_messages{group,topic}`` — popped, not acked, not
    yet revived messages, from the durable revive log (the admin API's
    :class:`~popbroker.inspect.popstate.StorePopState`; a lower bound by the
    checkpoints still in memory).
"""

from __future__ import annotations

from collections import defaultdict

from prometheus_client import CollectorRegistry, Counter, Gauge

from popbroker.inspect.popstate import StorePopState
from popbroker.pop.checkpoints import QueueKey
from popbroker.services.popack import PopackServices
from popbroker.services.settings import wall_clock_ms
from popbroker.store import names


class PopackMetrics:
    """The popack role's metrics in ``registry`` (see the module docstring)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "popfleet_broker_requests",
            "v2 RPCs answered, by RPC and top status code",
            ["rpc", "code"],
            registry=registry,
        )
        self.messages = Counter(
            "popfleet_broker_messages",
            "Messages sent, popped, acked, made invisible longer, forwarded to DLQ or pulled",
            ["op", "code"],
            registry=registry,
        )
        self.parked = Gauge(
            "popfleet_broker_parked_long_polls",
            "Long-polling receives and pulls parked until messages arrive",
            registry=registry,
        )
        self.buffer = Gauge(
            "popfleet_broker_checkpoint_buffer",
            "Checkpoints in popack memory (in_memory, writing) and queued offset commits",
            ["state"],
            registry=registry,
        )
        self.in_flight = Gauge(
            "popfleet_broker_inflight_messages",
            "POP messages delivered and not yet acked or revived, per group and topic",
            ["group", "topic"],
            registry=registry,
        )
        self._services: PopackServices | None = None
        self._pop_state: StorePopState | None = None

    def attach(self, services: PopackServices) -> None:
        """Read ``services`` (and its store) at scrape time."""
        self._services = services
        self._pop_state = StorePopState(services.store, clock=wall_clock_ms)

    async def refresh(self) -> None:
        services, pop_state = self._services, self._pop_state
        if services is None or pop_state is None:
            return
        self.parked.set(services.polling.parked)
        stats = services.state.buffer.stats()
        self.buffer.labels("in_memory").set(stats.in_memory)
        self.buffer.labels("writing").set(stats.writing)
        self.buffer.labels("commit_entries").set(stats.commit_entries)
        keys = [
            QueueKey(o.topic, o.group, o.queue_id)
            for o in await services.store.committed_offsets()
            if not names.is_system_topic(o.topic) or o.topic.startswith(names.RETRY_PREFIX)
        ]
        totals: dict[tuple[str, str], int] = defaultdict(int)
        for key, count in (await pop_state.in_flight(keys)).items():
            totals[(key.group, key.topic)] += count
        self.in_flight.clear()
        for (group, topic), count in totals.items():
            self.in_flight.labels(group, topic).set(count)
