"""Offsets and revive statistics, computed from the store and the live POP state.

Plain dataclasses out; the admin API turns them into its protobuf
(:mod:`popbroker.admin.convert`), the revive role's metrics read them
(:mod:`popbroker.metrics.revive`).

``GetOffsets`` (:func:`group_offsets`), for one group (a legal name; the admin
API checks it):

  1. The group must be configured or have committed offsets (``UnknownGroup``).
  2. Topics: the requested ones (each must exist, ``UnknownTopic``), else every
     topic the group has committed offsets on or a consume mode for. Each
     user topic's retry topic ``%RETRY%<group>+<topic>`` is added when it exists.
  3. Per queue: bounds, the committed offset (unset when never committed), the
     in-flight count from the :class:`~popbroker.inspect.popstate.PopStateProvider`
     (unset when unknown) and the store time of the oldest unconsumed message:
     the message at the committed offset (or at min when never committed).

``GetReviveStats`` (:func:`revive_stats`): per revive queue the bounds, the
revive progress (committed offset of ``CID_RMQ_SYS_REVIVE_GROUP``), the lag in
records and in time (now minus the store time of the record at the progress),
and the ledger statistics when known; per group the messages not yet consumed
in its retry topics and the messages held in its DLQ.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from popbroker.inspect.popstate import PopStateProvider
from popbroker.pop.checkpointbuffer import BufferStats
from popbroker.pop.checkpoints import QueueKey
from popbroker.pop.reviving import LedgerStats
from popbroker.store import names
from popbroker.store.api import QueueBounds, ReadStatus, StoreApi, TopicConfig
from popbroker.store.errors import UnknownGroup, UnknownTopic

Clock = Callable[[], int]


@dataclass(frozen=True, slots=True)
class QueueOffsets:
    """One queue of a group: bounds, committed offset, in flight, oldest unconsumed."""

    topic: str
    queue_id: int
    min_queue_offset: int
    max_queue_offset: int
    retry_of: str | None = None  # the user topic when ``topic`` is its retry topic
    committed_queue_offset: int | None = None
    in_flight_messages: int | None = None
    oldest_unconsumed_store_time_ms: int | None = None


@dataclass(frozen=True, slots=True)
class GroupOffsets:
    group: str
    now_ms: int
    queues: tuple[QueueOffsets, ...]


@dataclass(frozen=True, slots=True)
class ReviveQueueStats:
    revive_queue_id: int
    min_queue_offset: int
    max_queue_offset: int
    lag_messages: int
    revive_queue_offset: int | None = None  # the revive progress; None when never committed
    lag_ms: int | None = None
    ledger: LedgerStats | None = None  # None when unknown


@dataclass(frozen=True, slots=True)
class GroupRetryStats:
    group: str
    retry_messages: int
    dlq_messages: int


@dataclass(frozen=True, slots=True)
class ReviveStats:
    revive_topic: str
    now_ms: int
    queues: tuple[ReviveQueueStats, ...]
    groups: tuple[GroupRetryStats, ...]
    checkpoint_buffer: BufferStats | None  # None when unknown


async def oldest_unconsumed_store_time(
    store: StoreApi, bounds: QueueBounds, committed_queue_offset: int | None
) -> int | None:
    """Store time of the first message at or after the committed offset (min when never)."""
    start = bounds.min_queue_offset
    if committed_queue_offset is not None:
        start = max(start, committed_queue_offset)
    if start >= bounds.max_queue_offset:
        return None
    result = await store.read(bounds.topic, bounds.queue_id, start, max_count=1, max_scan=1)
    if result.status is ReadStatus.FOUND and result.messages:
        return result.messages[0].store_timestamp_ms
    return None


async def _bounds(store: StoreApi, topic: str, queue_id: int) -> QueueBounds | None:
    try:
        return await store.bounds(topic, queue_id)
    except UnknownTopic:  # deleted between listing and reading
        return None


async def group_offsets(
    store: StoreApi,
    pop_state: PopStateProvider,
    *,
    group: str,
    topics: Sequence[str],
    now_ms: int,
) -> GroupOffsets:
    """Steps 1-3 of the module docstring."""
    rows = await store.committed_offsets(group)
    configured = {g.name for g in await store.groups()}
    if group not in configured and not rows:
        raise UnknownGroup(f"group {group!r} does not exist")
    all_topics = {t.name: t for t in await store.topics()}
    wanted: list[str] = []
    if topics:
        for name in topics:
            if name not in all_topics:
                raise UnknownTopic(f"topic {name!r} does not exist")
            wanted.append(name)
    else:
        modes = [m.topic for m in await store.consume_modes() if m.group == group]
        wanted = [n for n in sorted({r.topic for r in rows} | set(modes)) if n in all_topics]
    for name in list(wanted):
        if not names.is_system_topic(name):
            retry = names.retry_topic(group, name)
            if retry in all_topics and retry not in wanted:
                wanted.append(retry)
    committed = {(r.topic, r.queue_id): r.queue_offset for r in rows}
    keys = [QueueKey(name, group, q) for name in wanted for q in range(all_topics[name].queue_nums)]
    in_flight = await pop_state.in_flight(keys)
    queues: list[QueueOffsets] = []
    for key in sorted(keys, key=lambda k: (k.topic, k.queue_id)):
        bounds = await _bounds(store, key.topic, key.queue_id)
        if bounds is None:
            continue
        parsed = names.parse_retry_topic(key.topic)
        offset = committed.get((key.topic, key.queue_id))
        queues.append(
            QueueOffsets(
                topic=key.topic,
                queue_id=key.queue_id,
                min_queue_offset=bounds.min_queue_offset,
                max_queue_offset=bounds.max_queue_offset,
                retry_of=parsed[1] if parsed is not None else None,
                committed_queue_offset=offset,
                in_flight_messages=in_flight.get(key),
                oldest_unconsumed_store_time_ms=await oldest_unconsumed_store_time(
                    store, bounds, offset
                ),
            )
        )
    return GroupOffsets(group=group, now_ms=now_ms, queues=tuple(queues))


async def revive_stats(
    store: StoreApi, pop_state: PopStateProvider, *, cluster: str, now_ms: int
) -> ReviveStats:
    """Revive queues and retry/DLQ depths (see the module docstring)."""
    topic = names.revive_topic(cluster)
    topics = {t.name: t for t in await store.topics()}
    ledgers = await pop_state.revive_ledgers()
    revive = topics.get(topic)
    queues: list[ReviveQueueStats] = []
    for revive_queue_id in range(revive.queue_nums if revive else 0):
        bounds = await _bounds(store, topic, revive_queue_id)
        if bounds is None:
            continue
        progress = await store.committed_offset(
            group=names.REVIVE_GROUP, topic=topic, queue_id=revive_queue_id
        )
        start = (
            bounds.min_queue_offset if progress is None else max(progress, bounds.min_queue_offset)
        )
        oldest = await oldest_unconsumed_store_time(store, bounds, start)
        queues.append(
            ReviveQueueStats(
                revive_queue_id=revive_queue_id,
                min_queue_offset=bounds.min_queue_offset,
                max_queue_offset=bounds.max_queue_offset,
                lag_messages=max(0, bounds.max_queue_offset - start),
                revive_queue_offset=progress,
                lag_ms=None if oldest is None else max(0, now_ms - oldest),
                ledger=ledgers.get(revive_queue_id),
            )
        )
    return ReviveStats(
        revive_topic=topic,
        now_ms=now_ms,
        queues=tuple(queues),
        groups=tuple(await _retry_stats(store, topics)),
        checkpoint_buffer=await pop_state.checkpoint_buffer(),
    )


async def _retry_stats(store: StoreApi, topics: dict[str, TopicConfig]) -> list[GroupRetryStats]:
    retry: dict[str, int] = {g.name: 0 for g in await store.groups()}
    dlq: dict[str, int] = dict.fromkeys(retry, 0)
    for name, config in topics.items():
        parsed = names.parse_retry_topic(name)
        if parsed is not None:
            group = parsed[0]
            for queue_id in range(config.queue_nums):
                bounds = await _bounds(store, name, queue_id)
                if bounds is None:
                    continue
                committed = await store.committed_offset(group=group, topic=name, queue_id=queue_id)
                start = bounds.min_queue_offset
                if committed is not None:
                    start = max(start, committed)
                retry[group] = retry.get(group, 0) + max(0, bounds.max_queue_offset - start)
        elif name.startswith(names.DLQ_PREFIX):
            group = name[len(names.DLQ_PREFIX) :]
            for queue_id in range(config.queue_nums):
                bounds = await _bounds(store, name, queue_id)
                if bounds is not None:
                    depth = bounds.max_queue_offset - bounds.min_queue_offset
                    dlq[group] = dlq.get(group, 0) + depth
    return [
        GroupRetryStats(group=g, retry_messages=retry.get(g, 0), dlq_messages=dlq.get(g, 0))
        for g in sorted(set(retry) | set(dlq))
    ]
