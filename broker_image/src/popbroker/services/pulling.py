"""Offset-based pulling for lite pull consumers (``PullMessage``, ``GetOffset``,
``UpdateOffset``, ``QueryOffset``; DESIGN §3.3).

Unlike POP, pulling keeps no broker-side state: the consumer names the queue
and the queue offset, gets messages and the next offset, and commits offsets
itself. The official Python client never calls these RPCs (fact sheet §4);
the Java lite pull consumer does.

Pull, as numbered steps:

  1. Validate: topic exists and is readable, group exists, the queue is a
     readable queue, the offset is not negative, batch 1..32, TAG filter.
  2. Read at the offset with the filter. Messages → answer them with the next
     offset. A scan that matched nothing, an offset below the queue's minimum
     (retention) or beyond its maximum → answer no messages and the offset to
     continue from, at once (the consumer corrects itself).
  3. At the end of the queue: park (long polling, keyed by this queue) for the
     poll budget — the same budget rule as a receive, always ending before the
     client's deadline — and read again when woken.

QueryOffset: ``BEGINNING`` = the queue's minimum, ``END`` = its maximum,
``TIMESTAMP`` = the first offset whose store time is at or after the given
time, found by binary search over ``[min, max)`` (one one-message read per
step).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from dataclasses import dataclass

from popbroker.pop import errors as pop_errors
from popbroker.pop import popping as planning
from popbroker.services import errors
from popbroker.services.configcache import ConfigCache
from popbroker.services.longpolling import LongPolling, Waiter
from popbroker.services.receiving import poll_budget_ms
from popbroker.services.settings import PopackSettings
from popbroker.store import filters
from popbroker.store.api import Permission, ReadStatus, StoreApi, StoredMessage, TopicConfig
from popbroker.store.errors import InvalidArgument, UnknownTopic


class OffsetPolicy(enum.Enum):
    """Where ``QueryOffset`` looks."""

    BEGINNING = "BEGINNING"
    END = "END"
    TIMESTAMP = "TIMESTAMP"


@dataclass(frozen=True, slots=True)
class PullRequest:
    """A pull as the client asked for it."""

    group: str
    topic: str
    queue_id: int
    queue_offset: int
    batch_size: int
    filter_expression: str = "*"
    sql_filter: bool = False
    poll_ms: int | None = None
    deadline_remaining_ms: int | None = None


@dataclass(frozen=True, slots=True)
class PullResult:
    """Messages from the offset on, and where the next pull starts."""

    messages: tuple[StoredMessage, ...]
    next_queue_offset: int


class Puller:
    """Pulls and offsets for one popack role (see the module docstring)."""

    def __init__(
        self,
        *,
        store: StoreApi,
        config: ConfigCache,
        polling: LongPolling,
        settings: PopackSettings,
    ) -> None:
        self._store = store
        self._config = config
        self._polling = polling
        self._settings = settings

    async def pull(self, request: PullRequest) -> PullResult:
        """Steps 1-3."""
        topic = await self._queue(request.topic, request.queue_id)
        await self._config.group(request.group)
        batch = planning.validate_batch_size(request.batch_size)
        if request.queue_offset < 0:
            raise errors.IllegalOffset(f"queue offset {request.queue_offset} is negative")
        if request.sql_filter:
            raise errors.IllegalFilterExpression("SQL92 filters are not supported; use TAG")
        tag_filter = request.filter_expression.strip() or "*"
        try:
            filters.parse_filter(tag_filter)
        except InvalidArgument as exc:
            raise errors.IllegalFilterExpression(str(exc)) from None
        poll_ms = poll_budget_ms(
            self._settings,
            poll_ms=request.poll_ms,
            deadline_remaining_ms=request.deadline_remaining_ms,
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + poll_ms / 1000
        waiter: Waiter | None = None
        if poll_ms > 0:
            waiter = self._polling.register(topic.name, request.group, request.queue_id)
        with waiter if waiter is not None else contextlib.nullcontext():
            while True:
                result = await self._store.read(
                    topic.name,
                    request.queue_id,
                    request.queue_offset,
                    max_count=batch,
                    tag_filter=tag_filter,
                )
                if result.status is ReadStatus.NO_SUCH_QUEUE:
                    raise errors.TopicNotFound(
                        f"topic {topic.name!r} has no queue {request.queue_id}"
                    )
                at_end = result.status in (
                    ReadStatus.OFFSET_OVERFLOW_ONE,
                    ReadStatus.NO_MESSAGE_IN_QUEUE,
                )
                if not at_end or waiter is None:
                    return PullResult(result.messages, result.next_queue_offset)
                remaining_s = deadline - loop.time()
                if remaining_s <= 0 or not await waiter.wait(remaining_s):
                    return PullResult((), request.queue_offset)

    async def get_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The group's committed offset on the queue (``OFFSET_NOT_FOUND`` when none)."""
        await self._queue(topic, queue_id)
        await self._config.group(group)
        committed = await self._store.committed_offset(group=group, topic=topic, queue_id=queue_id)
        if committed is None:
            raise errors.OffsetNotFound(f"group {group!r} has no offset on {topic}:{queue_id}")
        return committed

    async def update_offset(
        self, *, group: str, topic: str, queue_id: int, queue_offset: int
    ) -> None:
        """Commit ``queue_offset`` for the group (0 .. the queue's max)."""
        await self._queue(topic, queue_id)
        await self._config.group(group)
        bounds = await self._store.bounds(topic, queue_id)
        if not 0 <= queue_offset <= bounds.max_queue_offset:
            raise errors.IllegalOffset(
                f"queue offset {queue_offset} outside [0, {bounds.max_queue_offset}]"
            )
        await self._store.commit_offset(
            group=group, topic=topic, queue_id=queue_id, queue_offset=queue_offset
        )

    async def query_offset(
        self, topic: str, queue_id: int, *, policy: OffsetPolicy, timestamp_ms: int | None = None
    ) -> int:
        """See the module docstring."""
        await self._queue(topic, queue_id)
        bounds = await self._store.bounds(topic, queue_id)
        if policy is OffsetPolicy.BEGINNING:
            return bounds.min_queue_offset
        if policy is OffsetPolicy.END or timestamp_ms is None:
            return bounds.max_queue_offset
        low, high = bounds.min_queue_offset, bounds.max_queue_offset
        while low < high:  # first offset stored at or after timestamp_ms; O(log n) reads
            middle = (low + high) // 2
            result = await self._store.read(topic, queue_id, middle, max_count=1, max_scan=1)
            # a message removed meanwhile counts as "before": search above it
            if not result.messages or result.messages[0].store_timestamp_ms < timestamp_ms:
                low = middle + 1
            else:
                high = middle
        return low

    async def _queue(self, topic_name: str, queue_id: int) -> TopicConfig:
        topic = await self._config.topic(topic_name)
        if not topic.perm & Permission.READ:
            raise errors.TopicNotReadable(f"topic {topic.name!r} is not readable")
        if not 0 <= queue_id < topic.read_queue_nums:
            raise pop_errors.IllegalQueueId(
                f"queue {queue_id} is not a readable queue of {topic.name!r}"
            )
        try:
            await self._store.bounds(topic.name, queue_id)
        except UnknownTopic:
            raise errors.TopicNotFound(f"topic {topic.name!r} has no queue {queue_id}") from None
        return topic
