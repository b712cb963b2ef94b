"""A short-lived cache of the store's topics, groups, consume modes and cluster members.

Purpose: every send and receive needs the topic's queue count and the group's
settings. Asking the store each time costs a round trip per request when the
store is another process, so the popack role reads the whole configuration at
most every ``ttl_ms`` and serves lookups from memory.

Rules:

  1. A lookup refreshes the snapshot when it is older than ``ttl_ms``.
  2. A miss (unknown topic or group) refreshes once more, but not more often
     than every ``miss_refresh_ms``, so a topic created a moment ago is found at
     once while a client hammering an unknown topic cannot turn every request
     into a store round trip.
  3. One refresh runs at a time (an ``asyncio.Lock``); concurrent lookups wait
     for it instead of stampeding the store.

A (group, topic) without a stored consume mode is in PULL mode (the store's default).

Callers: receiving, sending, acking, routing (modes and members) and reviving.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from popbroker.services import errors
from popbroker.services.settings import Clock
from popbroker.store import names
from popbroker.store.api import (
    ClusterMember,
    ConsumeMode,
    ConsumeModeConfig,
    GroupConfig,
    StoreApi,
    TopicConfig,
)


@dataclass(frozen=True, slots=True)
class ConfigSnapshot:
    """The store's configuration at one moment."""

    topics: dict[str, TopicConfig]
    groups: dict[str, GroupConfig]
    modes: dict[tuple[str, str], ConsumeModeConfig]  # by (group, topic)
    members: tuple[ClusterMember, ...]
    taken_at_ms: int


class ConfigCache:
    """Topics, groups, consume modes and members of one store (see the module docstring)."""

    def __init__(
        self, store: StoreApi, *, clock: Clock, ttl_ms: int = 1_000, miss_refresh_ms: int = 100
    ) -> None:
        self._store = store
        self._clock = clock
        self._ttl_ms = ttl_ms
        self._miss_refresh_ms = miss_refresh_ms
        self._snapshot: ConfigSnapshot | None = None
        self._lock = asyncio.Lock()

    async def snapshot(self) -> ConfigSnapshot:
        """The current snapshot, refreshed when older than the TTL."""
        snapshot = self._snapshot
        if snapshot is None or self._clock() - snapshot.taken_at_ms >= self._ttl_ms:
            snapshot = await self.refresh(older_than_ms=self._ttl_ms)
        return snapshot

    async def refresh(self, *, older_than_ms: int = 0) -> ConfigSnapshot:
        """Re-read the configuration unless a snapshot younger than ``older_than_ms`` exists."""
        async with self._lock:
            snapshot = self._snapshot
            if snapshot is not None and self._clock() - snapshot.taken_at_ms < older_than_ms:
                return snapshot
            topics = await self._store.topics()
            groups = await self._store.groups()
            modes = await self._store.consume_modes()
            members = await self._store.members()
            snapshot = ConfigSnapshot(
                topics={t.name: t for t in topics},
                groups={g.name: g for g in groups},
                modes={(m.group, m.topic): m for m in modes},
                members=tuple(members),
                taken_at_ms=self._clock(),
            )
            self._snapshot = snapshot
            return snapshot

    async def topic(self, name: str) -> TopicConfig:
        """The user topic ``name``; raises :class:`TopicNotFound` (system topics included)."""
        if names.is_system_topic(name):
            raise errors.TopicNotFound(f"topic {name!r} is a system topic")
        found = (await self.snapshot()).topics.get(name)
        if found is None:
            found = (await self.refresh(older_than_ms=self._miss_refresh_ms)).topics.get(name)
        if found is None:
            raise errors.TopicNotFound(f"topic {name!r} does not exist")
        return found

    async def any_topic(self, name: str) -> TopicConfig | None:
        """Any topic, system topics included, or None."""
        return (await self.snapshot()).topics.get(name)

    async def group(self, name: str) -> GroupConfig:
        """The group ``name``; raises :class:`GroupNotFound`."""
        found = (await self.snapshot()).groups.get(name)
        if found is None:
            found = (await self.refresh(older_than_ms=self._miss_refresh_ms)).groups.get(name)
        if found is None:
            raise errors.GroupNotFound(f"consumer group {name!r} does not exist")
        return found

    async def group_or_none(self, name: str) -> GroupConfig | None:
        """The group ``name`` or None (revive uses it to skip deleted groups)."""
        return (await self.snapshot()).groups.get(name)

    async def consume_mode(self, *, group: str, topic: str) -> ConsumeModeConfig:
        """The consume mode of ``group`` on ``topic``; PULL when none is stored."""
        found = (await self.snapshot()).modes.get((group, topic))
        if found is not None:
            return found
        return ConsumeModeConfig(group=group, topic=topic, mode=ConsumeMode.PULL)

    async def members(self) -> tuple[ClusterMember, ...]:
        """The cluster members as the store knows them (empty: a one-member cluster)."""
        return (await self.snapshot()).members
