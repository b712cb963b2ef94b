"""Step 3 of a revive step: copy every un-acked message of a due checkpoint.

For one due :class:`~popbroker.pop.reviving.ReviveTask` of a revive queue:

  * read the un-acked messages back — in one read when the task's offsets lie
    within ``MAX_REVIVE_READ_SPAN``, else (and for any offset that read missed)
    one by one; :func:`~popbroker.pop.reviving.verify_revive_read` judges each:
    a message the retention removed or a re-created topic no longer has is
    skipped, never retried forever;
  * append the copies — to ``%RETRY%<group>+<topic>`` with ``reconsume_times +
    1``, or to ``%DLQ%<group>`` past the group's ``max_reconsume_times``
    (:func:`~popbroker.pop.retrytopics.retry_or_dlq`; the dead-letter copy is
    :func:`~popbroker.pop.retrytopics.dead_letter`'s) — in one store call, then
    ``complete`` the task; on failure ``fail`` it (back-off; only the offsets not
    yet copied are retried).

Callers: :class:`popbroker.services.revivequeue.ReviveQueueWorker`.
"""

from __future__ import annotations

import logging

from popbroker.pop import retrytopics
from popbroker.pop.reviving import ReadVerdict, ReviveLedger, ReviveTask, verify_revive_read
from popbroker.services import messages
from popbroker.services.configcache import ConfigCache
from popbroker.services.settings import Clock, ReviveRoleSettings
from popbroker.store.api import MessageToAppend, ReadStatus, StoreApi, StoredMessage
from popbroker.store.errors import NotLeader, StoreError

log = logging.getLogger(__name__)

MAX_REVIVE_READ_SPAN = 1024  # the store's largest read


class Redeliverer:
    """Revives the due checkpoints of one revive queue's ledger (see the module docstring)."""

    def __init__(
        self,
        *,
        store: StoreApi,
        config: ConfigCache,
        settings: ReviveRoleSettings,
        ledger: ReviveLedger,
        clock: Clock,
    ) -> None:
        self._store = store
        self._config = config
        self._settings = settings
        self._clock = clock
        self.ledger = ledger

    async def revive_due(self, now_ms: int) -> tuple[int, int, int]:
        """Revive what is due at ``now_ms``: (revived, dead-lettered, failed tasks)."""
        revived = dead = failed = 0
        tasks = self.ledger.due(now_ms, limit=self._settings.max_tasks_per_round)
        for index, task in enumerate(tasks):
            try:
                outcome = await self._revive(task)
            except NotLeader:  # a follower's revive idles until its replica leads (issue 18)
                for untried in tasks[index:]:
                    self.ledger.put_back(untried)
                raise
            if outcome is None:
                failed += 1
            else:
                revived += outcome[0]
                dead += outcome[1]
        return revived, dead, failed

    async def _revive(self, task: ReviveTask) -> tuple[int, int] | None:
        ck = task.checkpoint
        group = await self._config.group_or_none(ck.group)
        original = retrytopics.original_topic(ck.topic)
        topic_exists = group is not None and (await self._config.any_topic(original)) is not None
        copies: list[MessageToAppend] = []
        done: list[int] = []
        failed: list[int] = []
        dead = 0
        found = await self._read_span(
            ck.topic, ck.queue_id, queue_offsets=task.queue_offsets, topic_exists=topic_exists
        )
        for queue_offset in task.queue_offsets:
            verdict, message = found.get(queue_offset) or await self._read_back(
                ck.topic, ck.queue_id, queue_offset=queue_offset, topic_exists=topic_exists
            )
            if verdict is ReadVerdict.RETRY_LATER:
                failed.append(queue_offset)
                continue
            if verdict is not ReadVerdict.REPUT or message is None or group is None:
                log.info("revive: %s offset %d skipped (%s)", ck.key, queue_offset, verdict.value)
                done.append(queue_offset)
                continue
            target = retrytopics.retry_or_dlq(
                group=ck.group,
                topic=ck.topic,
                reconsume_times=message.reconsume_times,
                max_reconsume_times=group.max_reconsume_times,
            )
            dead += target.dead_letter
            copies.append(
                _copy(
                    message,
                    target,
                    group=ck.group,
                    original_topic=original,
                    pop_time_ms=ck.pop_time_ms,
                )
            )
            done.append(queue_offset)
        try:
            if copies:
                await self._store.append(copies)
        except NotLeader:
            raise  # revive_due puts the task back untried
        except StoreError as exc:
            log.warning("revive: re-put of %s failed: %s", ck.key, exc)
            self.ledger.fail(task, self._clock())
            return None
        if failed:
            self.ledger.fail(task, self._clock(), succeeded_queue_offsets=tuple(done))
            return None
        self.ledger.complete(task)
        return len(copies) - dead, dead

    async def _read_span(
        self, topic: str, queue_id: int, *, queue_offsets: tuple[int, ...], topic_exists: bool
    ) -> dict[int, tuple[ReadVerdict, StoredMessage | None]]:
        """The task's messages in one read when they lie close together (the usual case).

        Offsets the read does not return (removed, beyond max, a gap) are left out:
        the caller judges those one by one with :meth:`_read_back`.
        """
        if not topic_exists or not queue_offsets:
            return {}
        first, last = queue_offsets[0], queue_offsets[-1]
        span = last - first + 1
        if span > MAX_REVIVE_READ_SPAN:
            return {}
        result = await self._store.read(topic, queue_id, first, max_count=span, max_scan=span)
        wanted = set(queue_offsets)
        found: dict[int, tuple[ReadVerdict, StoredMessage | None]] = {}
        for message in result.messages:
            if message.queue_offset in wanted:
                verdict = verify_revive_read(
                    expected_queue_offset=message.queue_offset,
                    min_queue_offset=result.min_queue_offset,
                    max_queue_offset=result.max_queue_offset,
                    read_queue_offset=message.queue_offset,
                )
                found[message.queue_offset] = (verdict, message)
        return found

    async def _read_back(
        self, topic: str, queue_id: int, *, queue_offset: int, topic_exists: bool
    ) -> tuple[ReadVerdict, StoredMessage | None]:
        if not topic_exists:
            return ReadVerdict.SKIP_TOPIC_GONE, None
        result = await self._store.read(topic, queue_id, queue_offset, max_count=1, max_scan=1)
        if result.status is ReadStatus.NO_SUCH_QUEUE:
            return ReadVerdict.SKIP_TOPIC_GONE, None
        message = result.messages[0] if result.messages else None
        verdict = verify_revive_read(
            expected_queue_offset=queue_offset,
            min_queue_offset=result.min_queue_offset,
            max_queue_offset=result.max_queue_offset,
            read_queue_offset=None if message is None else message.queue_offset,
        )
        return verdict, message


def _copy(
    message: StoredMessage,
    target: retrytopics.RetryTarget,
    *,
    group: str,
    original_topic: str,
    pop_time_ms: int,
) -> MessageToAppend:
    if target.dead_letter:
        letter = retrytopics.dead_letter(
            group=group,
            original_topic=original_topic,
            properties=message.properties,
            delivered_times=target.reconsume_times,
        )
        topic, properties, reconsume_times = letter.topic, letter.properties, letter.reconsume_times
    else:
        topic, reconsume_times = target.topic, target.reconsume_times
        properties = retrytopics.with_origin(message.properties, original_topic=original_topic)
    properties.setdefault(messages.PROPERTY_FIRST_POP_TIME, str(pop_time_ms))
    return messages.copy_of(
        message,
        topic=topic,
        queue_id=target.queue_id,
        properties=properties,
        reconsume_times=reconsume_times,
    )
