"""Live clients per group, learnt from Telemetry settings and Heartbeats.

Purpose: broker-side assignment needs the live client ids of a group
(DESIGN §3.3), the receive path needs a client's type (a push consumer's queue
id is honoured, a simple consumer pops every queue), and Heartbeat answers
``UNRECOGNIZED_CLIENT_TYPE`` only when it carries no type at all.

Rules:

  1. A client is keyed by its ``x-mq-client-id`` header, as the proxy keys it.
  2. A settings command (Telemetry) registers or refreshes the client with its
     type, group and topics; a Heartbeat refreshes it (and registers it if the
     settings were never seen: 5.1.2 clients work without Telemetry).
  3. A client unseen for ``expiry_ms`` (default 120 s, 12 missed heartbeats)
     is dropped; NotifyClientTermination drops it at once.

Callers: the gRPC endpoint (Telemetry, Heartbeat, NotifyClientTermination,
ReceiveMessage, QueryAssignment).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from popbroker.services.settings import Clock


class ClientKind(enum.Enum):
    """The client types of the v2 protocol this broker distinguishes."""

    PRODUCER = "PRODUCER"
    PUSH_CONSUMER = "PUSH_CONSUMER"
    SIMPLE_CONSUMER = "SIMPLE_CONSUMER"
    PULL_CONSUMER = "PULL_CONSUMER"
    OTHER = "OTHER"


@dataclass(frozen=True, slots=True)
class ClientRecord:
    """What the broker knows about one live client."""

    client_id: str
    kind: ClientKind
    group: str | None
    topics: tuple[str, ...]
    last_seen_ms: int


class ClientRegistry:
    """Live clients (see the module docstring)."""

    def __init__(self, *, clock: Clock, expiry_ms: int = 120_000) -> None:
        self._clock = clock
        self._expiry_ms = expiry_ms
        self._clients: dict[str, ClientRecord] = {}

    def on_settings(
        self, client_id: str, *, kind: ClientKind, group: str | None, topics: tuple[str, ...]
    ) -> ClientRecord:
        """Rule 2: a settings command."""
        record = ClientRecord(client_id, kind, group, topics, self._clock())
        self._clients[client_id] = record
        return record

    def on_heartbeat(self, client_id: str, *, kind: ClientKind, group: str | None) -> ClientRecord:
        """Rule 2: a heartbeat."""
        now_ms = self._clock()
        known = self._clients.get(client_id)
        if known is None:
            record = ClientRecord(client_id, kind, group, (), now_ms)
        else:
            record = replace(known, last_seen_ms=now_ms, group=group or known.group)
        self._clients[client_id] = record
        return record

    def on_termination(self, client_id: str) -> None:
        """Rule 3: the client said goodbye."""
        self._clients.pop(client_id, None)

    def get(self, client_id: str) -> ClientRecord | None:
        """The live client ``client_id``, or None."""
        self.expire()
        return self._clients.get(client_id)

    def live_clients(self, group: str) -> list[str]:
        """Sorted ids of the group's live consumers."""
        self.expire()
        return sorted(
            record.client_id
            for record in self._clients.values()
            if record.group == group and record.kind is not ClientKind.PRODUCER
        )

    def expire(self) -> int:
        """Drop clients unseen for ``expiry_ms``; returns how many."""
        horizon = self._clock() - self._expiry_ms
        stale = [cid for cid, record in self._clients.items() if record.last_seen_ms < horizon]
        for client_id in stale:
            del self._clients[client_id]
        return len(stale)

    def __len__(self) -> int:
        return len(self._clients)
