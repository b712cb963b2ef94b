"""One pop attempt's values, and the queue reads both pop paths share.

  * :class:`PopRequest` — a validated pop of one group on one topic (built by
    :mod:`popbroker.services.receiving`).
  * :class:`PopOutcome` — what one attempt handed out, the backlog it saw and,
    for FIFO, when the earliest blocked queue unblocks.
  * :class:`Attempt` — the mutable record of one attempt while it visits queues.
  * :class:`QueueReader` — the store reads of a visit: the pop offset
    (:func:`popbroker.pop.popping.pop_offset`: the buffer's cursor, else the
    committed offset, else the initial offset, committed at once so a restart
    does not move it), a read of at most the rest of the batch with the
    request's tag filter, and the delivered message with its receipt handle.

Callers: :mod:`popbroker.services.popping` (concurrent queues) and
:mod:`popbroker.services.fifopopping` (FIFO queues).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from popbroker.pop import popping as planning
from popbroker.pop import receipts, retrytopics
from popbroker.pop.checkpoints import Checkpoint, QueueKey
from popbroker.services.messages import DeliveredMessage
from popbroker.services.settings import PopackSettings
from popbroker.store.api import ReadResult, StoreApi, StoredMessage
from popbroker.store.errors import UnknownTopic


@dataclass(frozen=True, slots=True)
class PopRequest:
    """A validated pop of one group on one topic."""

    group: str
    topic: str
    queue_id: int  # -1: every queue of the topic on this broker
    read_queue_num: int
    max_messages: int
    invisible_ms: int
    tag_filter: str = "*"
    fifo: bool = False
    attempt_id: str | None = None
    max_reconsume_times: int = retrytopics.DEFAULT_MAX_RECONSUME_TIMES  # FIFO dead letters


@dataclass(frozen=True, slots=True)
class PopOutcome:
    """What one attempt handed out."""

    messages: tuple[DeliveredMessage, ...]
    rest_num: int  # backlog seen behind this attempt (0: nothing more to wake anyone for)
    retry_at_ms: int | None = None  # FIFO: when the earliest blocked queue unblocks
    throttled: int = 0  # queues skipped: their in-flight messages reached the threshold


@dataclass
class Attempt:
    """One attempt while it visits its queues (steps 1-5 of the pop)."""

    request: PopRequest
    pop_time_ms: int
    revive_queue_id: int
    delivered: list[DeliveredMessage] = field(default_factory=list)
    rest_num: int = 0
    retry_at_ms: int | None = None
    write_now: list[Checkpoint] = field(default_factory=list)
    throttled: int = 0


class QueueReader:
    """Store reads shared by the concurrent and the FIFO visits."""

    def __init__(self, *, store: StoreApi, settings: PopackSettings) -> None:
        self._store = store
        self._settings = settings

    async def pop_start(self, key: QueueKey, *, pop_cursor: int | None) -> int | None:
        """Where the pop of ``key`` starts (:func:`popbroker.pop.popping.pop_offset`).

        Reads only what the rule needs: nothing with a cursor, else the committed
        offset, else the queue's bounds for the initial offset, which it commits.
        None: the (retry) topic does not exist yet.
        """
        store = self._store
        committed = init = None
        if pop_cursor is None:
            committed = await store.committed_offset(
                group=key.group, topic=key.topic, queue_id=key.queue_id
            )
            if committed is None:
                try:
                    bounds = await store.bounds(key.topic, key.queue_id)
                except UnknownTopic:
                    return None
                init = planning.init_queue_offset(
                    topic=key.topic,
                    init_mode=planning.InitMode.MAX,
                    min_queue_offset=bounds.min_queue_offset,
                    max_queue_offset=bounds.max_queue_offset,
                )
        start = planning.pop_offset(
            pop_cursor=pop_cursor, committed_queue_offset=committed, init_queue_offset=init
        )
        if start.initialized:
            await store.commit_offset(
                group=key.group,
                topic=key.topic,
                queue_id=key.queue_id,
                queue_offset=start.queue_offset,
            )
        return start.queue_offset

    async def read(
        self, attempt: Attempt, key: QueueKey, start: int, *, limit: int | None = None
    ) -> ReadResult:
        """At most the rest of the batch (and ``limit``) from ``start``, tag-filtered."""
        request = attempt.request
        count = planning.remaining_batch(request.max_messages, len(attempt.delivered))
        return await self._store.read(
            key.topic,
            key.queue_id,
            start,
            max_count=count if limit is None else min(count, limit),
            tag_filter=request.tag_filter,
        )

    def delivered(
        self,
        attempt: Attempt,
        message: StoredMessage,
        *,
        start_queue_offset: int,
        topic_type: receipts.TopicType,
        delivery_attempt: int,
    ) -> DeliveredMessage:
        """``message`` as handed out by ``attempt``, with its receipt handle."""
        request = attempt.request
        handle = receipts.ReceiptHandle(
            start_queue_offset=start_queue_offset,
            pop_time_ms=attempt.pop_time_ms,
            invisible_ms=request.invisible_ms,
            revive_queue_id=attempt.revive_queue_id,
            topic_type=topic_type,
            broker_name=self._settings.broker_name,
            queue_id=message.queue_id,
            queue_offset=message.queue_offset,
            physical_offset=message.physical_offset,
        )
        return DeliveredMessage(
            topic=request.topic,
            stored=message,
            receipt_handle=receipts.encode(handle),
            delivery_attempt=delivery_attempt,
            invisible_ms=request.invisible_ms,
        )
