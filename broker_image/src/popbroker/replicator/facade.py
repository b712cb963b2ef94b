"""The store as a replica serves it to popack, revive and the admin API (issue 18).

Reads go to the local store. Writes go to the leader only; a follower refuses every one
with ``NotLeader`` (nothing is written there that the leader would not hold), and so does a
leader whose last renewal is older than its renew deadline (cut off from the API server):

* log writes (``append``, ``append_records``) go through the leader's SYNC appends
  (:class:`~popbroker.replicator.wire.SyncAppends`);
* config writes (topics, groups, consume modes) are written on the leader and answered once
  every in-sync follower holds them (``SyncAppends.config_replicated``);
* committed offsets are written on the leader and reach the followers with the next state
  snapshot (at most ``state_interval_s`` later: ``popbroker.replicator.wire``);
* members (the routing table the operator pushes to every pod) stay each pod's own; read
  back, each member that is a broker set names its leader's client endpoint, as the set's
  Lease says (``Replica.directory``), so routes follow a failover without the operator.
  A pod with no members pushed yet routes its own set to its leader.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from popbroker.replication.figures import ReplicationFigures
from popbroker.replicator.replica import Replica
from popbroker.replicator.wire import SyncAppends
from popbroker.store.api import (
    AppendResult,
    ClusterMember,
    ConsumeModeConfig,
    GroupConfig,
    MessageToAppend,
    TopicConfig,
)
from popbroker.store.errors import NotLeader
from popbroker.store.local import LocalStore

_T = TypeVar("_T")


class ReplicatedStore:
    """A ``StoreApi`` over a replica's local store (module docstring)."""

    def __init__(self, replica: Replica) -> None:
        self._replica = replica

    def __getattr__(self, name: str) -> Any:
        return getattr(self._replica.store, name)

    async def hand_over(self, successor: str | None, *, timeout_s: float) -> tuple[str, int]:
        """``Replica.hand_over``: the admin API's ``HandOver``."""
        return await self._replica.hand_over(successor, timeout_s=timeout_s)

    def replication_figures(self) -> ReplicationFigures:
        """The replica's figures (the store role's /metrics)."""
        return self._replica.figures()

    def _leading(self) -> SyncAppends:
        """The leader's appends; ``NotLeader`` on a follower, and on a leader whose last
        renewal is past the renew deadline (``Replica.leads_now``): another may lead by now."""
        appends = self._replica.appends
        if appends is None or not self._replica.leads_now:
            self._replica.fenced_writes += 1
            raise NotLeader(f"{self._replica.name} does not lead its broker set now")
        return appends

    async def members(self) -> list[ClusterMember]:
        pushed = await self._replica.store.members()
        directory = self._replica.directory
        if directory is None:
            return pushed
        leaders = directory.endpoints
        members = [
            dataclasses.replace(m, endpoint=leaders.get(m.broker_name, m.endpoint)) for m in pushed
        ]
        own = self._replica.broker_set
        if own in leaders and not any(m.broker_name == own for m in members):
            members.append(ClusterMember(own, leaders[own]))
        return members

    async def append(self, messages: Sequence[MessageToAppend]) -> list[AppendResult]:
        return await self._leading().append(messages)

    async def append_records(self, records: Sequence[bytes]) -> list[AppendResult]:
        return await self._leading().append_records(records)

    async def commit_offset(
        self, *, group: str, topic: str, queue_id: int, queue_offset: int
    ) -> None:
        self._leading()
        await self._replica.store.commit_offset(
            group=group, topic=topic, queue_id=queue_id, queue_offset=queue_offset
        )

    async def delete_offsets(self, group: str, topic: str | None = None) -> None:
        self._leading()
        await self._replica.store.delete_offsets(group, topic)

    async def _config_write(self, write: Callable[[LocalStore], Awaitable[_T]]) -> _T:
        """A config write on the leader, answered once every in-sync follower holds it;
        refused before it is written when the set is below its minimum."""
        appends = self._leading()
        appends.check_members()
        result = await write(self._replica.store)
        await appends.config_replicated()
        return result

    async def put_topic(self, topic: TopicConfig) -> TopicConfig:
        return await self._config_write(lambda store: store.put_topic(topic))

    async def delete_topic(self, name: str) -> None:
        await self._config_write(lambda store: store.delete_topic(name))

    async def put_group(self, group: GroupConfig) -> GroupConfig:
        return await self._config_write(lambda store: store.put_group(group))

    async def delete_group(self, name: str) -> None:
        await self._config_write(lambda store: store.delete_group(name))

    async def put_consume_mode(self, mode: ConsumeModeConfig) -> ConsumeModeConfig:
        return await self._config_write(lambda store: store.put_consume_mode(mode))
