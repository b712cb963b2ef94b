"""Ack, change of invisible time, and forwarding to the dead-letter queue.

Every request carries an untrusted receipt handle. Validation, in order:

  1. The group and the topic exist (``CONSUMER_GROUP_NOT_FOUND`` /
     ``TOPIC_NOT_FOUND``).
  2. The handle decodes strictly (:func:`popbroker.pop.receipts.decode`) and
     names this broker and one of its revive queues; its queue id exists on
     the real topic (the retry topic ``%RETRY%<group>+<topic>`` for a retried
     message).
  3. It has not expired (``pop time + invisible time > now``, as the proxy
     checks) and was not superseded by a change of invisible time.

Ack (non-FIFO): merge into the in-memory checkpoint when it is still buffered
(a fully acked CK is then never written); otherwise check the offset against
the queue's bounds and append an ACK record to the handle's revive queue — the
CK is already durable before it. Acks are idempotent.

Ack (FIFO): under the queue lock (awaited, bounded) set the bit in the
queue's order info and commit the first un-acked offset; wake the queue's
parked receives when the batch is done.

Change invisible time (non-FIFO, fact sheet §4.3): append the new
one-message CK **first**, then ack the old handle, then remember the old
handle as superseded; the new handle's start offset is the message's own
offset so acks with it match the new CK (upstream #9583). FIFO: move the
message's next visible time in the order info.

Forward to DLQ: read the message back, append its dead-letter copy
(:func:`popbroker.pop.retrytopics.dead_letter`: ``%DLQ%<group>``, the original
topic kept in ``ORIGIN_TOPIC`` unless an earlier hop set it, the reconsume
times = the client's delivery attempt), then ack the handle.

Callers: the gRPC endpoint (AckMessage, ChangeInvisibleDuration,
ForwardMessageToDeadLetterQueue).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace

from popbroker.pop import errors as pop_errors
from popbroker.pop import invisibility, orderinfo, popping, receipts, records, retrytopics
from popbroker.pop.checkpointbuffer import AckOutcome
from popbroker.pop.checkpoints import CheckpointKey, QueueKey
from popbroker.pop.receipts import ReceiptHandle
from popbroker.services import errors, messages, revivelog
from popbroker.services.configcache import ConfigCache
from popbroker.services.popstate import PopState
from popbroker.services.settings import PopackSettings
from popbroker.store.api import StoreApi, StoredMessage, TopicConfig
from popbroker.store.errors import StoreError, UnknownTopic
from popbroker.values import per_message

log = logging.getLogger(__name__)

FIFO_LOCK_TIMEOUT_S = 3.0


@per_message
class _Target:
    """A validated handle and the topic it really names."""

    handle: ReceiptHandle
    group: str
    topic: str  # the topic the client names (original)
    real_topic: str  # the topic read (the retry topic for a retried message)
    key: CheckpointKey  # the checkpoint an ack with the handle matches

    @property
    def queue_key(self) -> QueueKey:
        return QueueKey(self.real_topic, self.group, self.handle.queue_id)


class Acker:
    """Acks and changes of invisible time for one popack role."""

    def __init__(
        self,
        *,
        store: StoreApi,
        state: PopState,
        config: ConfigCache,
        settings: PopackSettings,
        on_unblocked: Callable[[str, str], object] = lambda topic, group: None,
    ) -> None:
        self._store = store
        self._state = state
        self._config = config
        self._settings = settings
        self._on_unblocked = on_unblocked

    # -- ack -------------------------------------------------------------------------------

    async def ack(self, *, group: str, topic: str, receipt_handle: str) -> None:
        """Ack one message; raises on an invalid handle (see the module docstring)."""
        target = await self._validate(group, topic, receipt_handle)
        await self._ack_target(target)

    async def ack_many(
        self, *, group: str, topic: str, receipt_handles: Sequence[str]
    ) -> list[Exception | None]:
        """Ack each of ``receipt_handles`` (one AckMessage request's entries), in order.

        One outcome per handle: None when acked, else the exception :meth:`ack` would
        have raised for that handle alone; one handle's failure does not stop the
        others. The group and topic are looked up once for all of them.
        """
        try:
            topic_config = await self._configs(group, topic)
        except Exception as exc:  # noqa: BLE001 - every entry answers with it
            return [exc] * len(receipt_handles)
        outcomes: list[Exception | None] = []
        for receipt_handle in receipt_handles:
            try:
                target = self._target(
                    group, topic, topic_config=topic_config, receipt_handle=receipt_handle
                )
                # the common case without a coroutine: a non-FIFO ack merged in memory
                if target.handle.is_fifo:
                    await self._ack_fifo(target)
                elif not self._ack_in_memory(target):
                    await self._write_ack(target)
            except Exception as exc:  # noqa: BLE001 - this entry's answer (the caller maps it)
                outcomes.append(exc)
            else:
                outcomes.append(None)
        return outcomes

    async def _ack_target(self, target: _Target) -> None:
        if target.handle.is_fifo:
            await self._ack_fifo(target)
        else:
            await self._ack_concurrent(target)

    async def _ack_concurrent(self, target: _Target) -> None:
        if not self._ack_in_memory(target):
            await self._write_ack(target)

    def _ack_in_memory(self, target: _Target) -> bool:
        """A non-FIFO ack's merge into its buffered checkpoint; False when that is no longer
        buffered, and the ack must be written (:meth:`_write_ack`)."""
        state, offset = self._state, target.handle.queue_offset
        outcome = state.buffer.ack(target.key, offset)
        if outcome is AckOutcome.BAD_INDEX:
            raise pop_errors.InvalidReceiptHandle("the handle's offset is not in its checkpoint")
        state.inflight.on_ack(target.key, offset)
        return outcome is not AckOutcome.NOT_BUFFERED

    async def _write_ack(self, target: _Target) -> None:
        """An ACK record in the handle's revive queue: its checkpoint is already durable."""
        handle = target.handle
        await self._check_offset_exists(target)
        ack = records.ack_for(target.key, (handle.queue_offset,))
        await self._store.append(
            [
                revivelog.record_message(
                    self._settings.cluster, ack, revive_queue_id=handle.revive_queue_id
                )
            ]
        )

    async def _ack_fifo(self, target: _Target) -> None:
        state = self._state
        key = target.queue_key
        token = await state.locks.lock(key, timeout_s=FIFO_LOCK_TIMEOUT_S)
        if token is None:
            raise errors.TooManyRequests(f"queue {key} is busy; retry the ack")
        try:
            committed = await self._store.committed_offset(
                group=key.group, topic=key.topic, queue_id=key.queue_id
            )
            result = orderinfo.on_ack(
                state.order_infos.get(key),
                queue_offset=target.handle.queue_offset,
                pop_time_ms=target.handle.pop_time_ms,
                committed_queue_offset=committed,
            )
            if result.status is orderinfo.FifoAckStatus.NOT_IN_BATCH:
                raise pop_errors.InvalidReceiptHandle("the handle's offset is not in its batch")
            if result.status is orderinfo.FifoAckStatus.STALE:
                return
            if result.info is not None:
                state.order_infos[key] = result.info
            next_offset = result.next_committed_queue_offset
            if next_offset is not None and (committed is None or next_offset > committed):
                await self._store.commit_offset(
                    group=key.group,
                    topic=key.topic,
                    queue_id=key.queue_id,
                    queue_offset=next_offset,
                )
            if result.info is None or orderinfo.unblock_time_ms(result.info) is None:
                self._on_unblocked(target.topic, target.group)
        finally:
            state.locks.unlock(key, token)

    # -- change invisible time ---------------------------------------------------------------

    async def change_invisible(
        self, *, group: str, topic: str, receipt_handle: str, invisible_ms: int
    ) -> str:
        """Change one message's invisible time; returns the new receipt handle."""
        target = await self._validate(group, topic, receipt_handle)
        popping.validate_invisible_ms(invisible_ms, popping.CHANGE_INVISIBLE_BOUNDS)
        if target.handle.is_fifo:
            return await self._change_fifo(target, invisible_ms)
        state = self._state
        handle = target.handle
        bounds = await self._bounds(target)
        now_ms = state.clock()
        change = invisibility.plan_change(
            handle,
            topic=target.real_topic,
            group=target.group,
            new_invisible_ms=invisible_ms,
            now_ms=now_ms,
            min_queue_offset=bounds[0],
            max_queue_offset=bounds[1],
        )
        cluster = self._settings.cluster
        await self._store.append([revivelog.ck_message(cluster, change.checkpoint)])
        outcome = state.buffer.ack(change.old_ack_key, change.queue_offset)
        if outcome is AckOutcome.NOT_BUFFERED:
            ack = records.ack_for(change.old_ack_key, (change.queue_offset,))
            try:
                await self._store.append(
                    [revivelog.record_message(cluster, ack, revive_queue_id=handle.revive_queue_id)]
                )
            except StoreError as exc:  # the old CK revives too: a duplicate, never a loss
                log.warning("acking the superseded handle failed: %s", exc)
        new_ck = change.checkpoint
        state.inflight.on_ack(change.old_ack_key, change.queue_offset)
        state.inflight.on_pop(
            new_ck.key, [change.queue_offset], until_ms=new_ck.pop_time_ms + new_ck.invisible_ms
        )
        state.superseded.add(
            change.old_ack_key,
            change.queue_offset,
            expires_at_ms=invisibility.superseded_until_ms(handle),
            now_ms=now_ms,
        )
        return receipts.encode(change.handle)

    async def _change_fifo(self, target: _Target, invisible_ms: int) -> str:
        state = self._state
        key = target.queue_key
        token = await state.locks.lock(key, timeout_s=FIFO_LOCK_TIMEOUT_S)
        if token is None:
            raise errors.TooManyRequests(f"queue {key} is busy; retry")
        try:
            info = state.order_infos.get(key)
            if info is None:
                raise pop_errors.InvalidReceiptHandle("no FIFO batch is in flight for this handle")
            new_info, handle_invisible_ms = orderinfo.change_invisible(
                info,
                queue_offset=target.handle.queue_offset,
                pop_time_ms=target.handle.pop_time_ms,
                invisible_ms=invisible_ms,
                now_ms=state.clock(),
            )
            state.order_infos[key] = new_info
        finally:
            state.locks.unlock(key, token)
        return receipts.encode(replace(target.handle, invisible_ms=handle_invisible_ms))

    # -- dead letters ----------------------------------------------------------------------

    async def forward_to_dlq(self, *, group: str, topic: str, receipt_handle: str) -> None:
        """Copy the handle's message to ``%DLQ%<group>``, then ack it."""
        target = await self._validate(group, topic, receipt_handle)
        handle = target.handle
        result = await self._store.read(
            target.real_topic, handle.queue_id, handle.queue_offset, max_count=1
        )
        found = [m for m in result.messages if m.queue_offset == handle.queue_offset]
        if not found:
            raise pop_errors.InvalidReceiptHandle("the handle's message no longer exists")
        message = found[0]
        letter = retrytopics.dead_letter(
            group=group,
            original_topic=target.topic,
            properties=message.properties,
            delivered_times=self._delivered_times(target, message),
        )
        await self._store.append([messages.dead_letter_copy(message, letter)])
        if handle.is_fifo:
            await self._ack_fifo(target)
        else:
            await self._ack_concurrent(target)

    def _delivered_times(self, target: _Target, message: StoredMessage) -> int:
        """How often the handle's message was handed out, counting the handle's delivery.

        As the client's delivery attempt: ``reconsume_times + 1``, plus for a FIFO
        message the redeliveries its queue's order info counted (when it still has
        handle's batch).
        """
        delivered = message.reconsume_times + 1
        handle = target.handle
        if handle.is_fifo:
            info = self._state.order_infos.get(target.queue_key)
            if (
                info is not None
                and info.pop_time_ms == handle.pop_time_ms
                and handle.queue_offset in info.queue_offsets
            ):
                delivered += orderinfo.reconsume_times(info, handle.queue_offset)
        return delivered

    # -- validation --------------------------------------------------------------------------

    async def _validate(self, group: str, topic: str, receipt_handle: str) -> _Target:
        topic_config = await self._configs(group, topic)
        return self._target(group, topic, topic_config=topic_config, receipt_handle=receipt_handle)

    async def _configs(self, group: str, topic: str) -> TopicConfig:
        """Step 1 of the validation: the group and the topic exist; the topic's config."""
        await self._config.group(group)
        return await self._config.topic(topic)

    def _target(
        self, group: str, topic: str, *, topic_config: TopicConfig, receipt_handle: str
    ) -> _Target:
        """Steps 2 and 3 of the validation (module docstring)."""
        now_ms = self._state.clock()
        handle = receipts.decode(
            receipt_handle,
            now_ms=now_ms,
            expected_broker=self._settings.broker_name,
            revive_queue_num=self._settings.revive_queue_num,
        )
        if handle.is_retry:
            real_topic = retrytopics.retry_topic(group, topic)
            if handle.queue_id != 0:
                raise pop_errors.InvalidReceiptHandle("a retry topic has one queue")
        else:
            real_topic = topic
            if handle.queue_id >= topic_config.queue_nums:
                raise pop_errors.InvalidReceiptHandle(
                    f"topic {topic!r} has no queue {handle.queue_id}"
                )
        if handle.next_visible_ms <= now_ms:
            raise pop_errors.InvalidReceiptHandle("receipt handle is expired")
        key = invisibility.handle_key(handle, topic=real_topic, group=group)
        if self._state.superseded.is_superseded(key, handle.queue_offset, now_ms):
            raise pop_errors.InvalidReceiptHandle(
                "receipt handle was superseded by a change of invisible time"
            )
        return _Target(handle, group, topic, real_topic, key)

    async def _bounds(self, target: _Target) -> tuple[int, int]:
        try:
            bounds = await self._store.bounds(target.real_topic, target.handle.queue_id)
        except UnknownTopic:
            raise pop_errors.InvalidReceiptHandle("the handle's queue does not exist") from None
        return bounds.min_queue_offset, bounds.max_queue_offset

    async def _check_offset_exists(self, target: _Target) -> None:
        low, high = await self._bounds(target)
        if not low <= target.handle.queue_offset < high:
            raise pop_errors.InvalidReceiptHandle(
                f"queue offset {target.handle.queue_offset} outside [{low}, {high})"
            )
