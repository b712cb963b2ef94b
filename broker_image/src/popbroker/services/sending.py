"""Sends (``SendMessage``): validation, queue choice, DELAY, idempotent retries, batches.

Steps for one request (one message or a producer's batch):

  1. Each message on its own: the topic exists and is writable; the message's
     kind is accepted by the topic (``MIXED`` accepts NORMAL, FIFO and DELAY);
     transactions and the newer LITE/PRIORITY kinds are unsupported.
  2. Each message on its own: body non-empty and at most ``max_body_bytes``;
     non-blank message id; a tag without ``|``; non-blank keys; a message group
     for FIFO; user properties within count and size and without reserved keys.
     A message that fails steps 1-2 gets its own error; the others go on.
  3. Idempotency: a message id already sent to the topic within
     ``send_dedup_window_ms`` returns the first receipt without appending again
     (the official producer retries at once with the same id after any error,
     fact sheet §12); a send still in progress is awaited, not repeated, and so
     is an id repeated inside one batch. The window is bounded in entries; it is
     memory only, so a restart of the role can still store a retried message
     twice (at-least-once).
  4. The queue: FIFO messages hash their message group (CRC32) onto the
     topic's write queues so one group keeps one order; others round-robin.
  5. The new messages of the request are stored with **one** store append
     (all or none): a DELAY message due in the future as a ``delay`` record in
     the revive log (:mod:`popbroker.services.delaying` delivers it when due),
     anything else in its queue. The append runs as its own task, so a client
     that gave up waiting does not cancel it under its own retry; if it fails,
     every message it carried gets the error and leaves the window (a retry then
     appends for real).

A message comes as an :class:`OutgoingMessage` (decoded from the wire) or, from the
compiled front end, as an :class:`EncodedMessage`: the unplaced record already encoded,
with the fields steps 1-4 read. Step 2 checks what those fields show (the front end
checked keys and property names by the same rules); step 5 writes the chosen queue into
the record, and a request with any encoded message is appended as records
(``StoreApi.append_records``, the others encoded here).

Callers: the gRPC endpoint's SendMessage handler.
"""

from __future__ import annotations

import asyncio
import zlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from popbroker.services import errors, messages, revivelog
from popbroker.services.configcache import ConfigCache
from popbroker.services.messages import EncodedMessage, MessageKind, OutgoingMessage, SendReceipt
from popbroker.services.settings import Clock, PopackSettings
from popbroker.store import appending
from popbroker.store import format as fmt
from popbroker.store.api import (
    AppendResult,
    MessageToAppend,
    MessageType,
    Permission,
    StoreApi,
    TopicConfig,
)
from popbroker.store.errors import EmptyBody, MessageTooLarge
from popbroker.values import per_message

MAX_MESSAGE_GROUP_CHARS = 128
MAX_TAG_CHARS = 128

_ACCEPTS: dict[MessageType, frozenset[MessageKind]] = {
    MessageType.NORMAL: frozenset({MessageKind.NORMAL}),
    MessageType.FIFO: frozenset({MessageKind.FIFO}),
    MessageType.DELAY: frozenset({MessageKind.DELAY}),
    MessageType.TRANSACTION: frozenset({MessageKind.TRANSACTION}),
    MessageType.MIXED: frozenset({MessageKind.NORMAL, MessageKind.FIFO, MessageKind.DELAY}),
}


def accepted_kinds(message_type: MessageType) -> frozenset[MessageKind]:
    """The message kinds a topic of ``message_type`` accepts (also used by routes)."""
    return _ACCEPTS[message_type]


@dataclass(slots=True)
class _Sent:
    """A message id in the window whose append is still in progress."""

    expires_at_ms: int
    result: asyncio.Future[SendReceipt]


# A message id in the window whose append is done: ``(expires_at_ms, queue_id, queue_offset,
# delayed)`` (the topic and id are its key). Ints and a bool only, so the garbage collector
# stops tracking it: the window holds up to ``send_dedup_max_entries`` ids, and as a future,
# a receipt and an entry each they were most of what a full collection walked (pauses of
# 100-400 ms at 200k ids, the tail of the latency at half load).
_Settled = tuple[int, int, int, bool]

Sendable = OutgoingMessage | EncodedMessage
_FRONT_KINDS = frozenset({MessageKind.NORMAL, MessageKind.FIFO})


@per_message
class _Pending:
    """A new message of a request, waiting for the request's one append."""

    topic: TopicConfig
    message: Sendable
    result: asyncio.Future[SendReceipt]


SendOutcome = SendReceipt | Exception


class Sender:
    """Sends for one popack role (see the module docstring)."""

    def __init__(
        self,
        *,
        store: StoreApi,
        config: ConfigCache,
        settings: PopackSettings,
        clock: Clock,
    ) -> None:
        self._store = store
        self._config = config
        self._settings = settings
        self._clock = clock
        self._round_robin = 0
        self._sent: OrderedDict[tuple[str, str], _Sent | _Settled] = OrderedDict()
        self._appends: set[asyncio.Task[None]] = set()  # running appends (kept referenced)

    async def send_batch(self, batch: Sequence[Sendable]) -> list[SendOutcome]:
        """Steps 1-5 for a request: a receipt or the error, per message, in order."""
        checked: list[TopicConfig | Exception] = []
        for message in batch:  # steps 1-2 (the only awaits before the append starts)
            try:
                topic = await self._config.topic(message.topic)
                self._validate(topic, message)
            except Exception as exc:  # noqa: BLE001 - each message gets its own answer
                checked.append(exc)
            else:
                checked.append(topic)
        waits = self._start_append(batch, checked)
        outcomes: list[SendOutcome] = []
        for wait in waits:
            if not isinstance(wait, asyncio.Future):
                outcomes.append(wait)  # refused, or a receipt of a settled repeat
                continue
            try:
                # Shielded: a caller that goes cancels neither the append nor the future
                # other requests (duplicates in the window) wait on. A cancelled append
                # (the broker stops) raises CancelledError here: so is this call.
                outcomes.append(await asyncio.shield(wait))
            except Exception as exc:  # noqa: BLE001 - the append's error, for this message
                outcomes.append(exc)
        return outcomes

    def _start_append(
        self, batch: Sequence[Sendable], checked: Sequence[TopicConfig | Exception]
    ) -> list[asyncio.Future[SendReceipt] | SendReceipt | Exception]:
        """Steps 3-5 without awaiting: a cancelled caller never leaves a window entry unresolved."""
        now_ms = self._clock()
        self._expire(now_ms)
        loop = asyncio.get_running_loop()
        waits: list[asyncio.Future[SendReceipt] | SendReceipt | Exception] = []
        pending: list[_Pending] = []
        for message, topic in zip(batch, checked, strict=True):
            if isinstance(topic, Exception):
                waits.append(topic)
                continue
            dedup_key = (message.topic, message.message_id)
            sent = self._sent.get(dedup_key)
            if sent is None:
                sent = _Sent(now_ms + self._settings.send_dedup_window_ms, loop.create_future())
                self._sent[dedup_key] = sent
                pending.append(_Pending(topic, message, sent.result))
            if isinstance(sent, tuple):
                _, queue_id, queue_offset, delayed = sent
                waits.append(
                    SendReceipt(message.message_id, message.topic, queue_id, queue_offset, delayed)
                )
            else:
                waits.append(sent.result)
        if pending:
            task = asyncio.create_task(self._append(pending, now_ms))
            self._appends.add(task)
            task.add_done_callback(self._appends.discard)
        return waits

    def _forget(self, message: Sendable, result: asyncio.Future[SendReceipt]) -> None:
        """A failed append may be retried for real: drop it from the window."""
        dedup_key = (message.topic, message.message_id)
        sent = self._sent.get(dedup_key)
        if isinstance(sent, _Sent) and sent.result is result:
            del self._sent[dedup_key]

    def _settle(self, pending: _Pending, receipt: SendReceipt) -> None:
        """A done append's id stays in the window as a :data:`_Settled` tuple, in place."""
        dedup_key = (pending.message.topic, pending.message.message_id)
        sent = self._sent.get(dedup_key)
        if isinstance(sent, _Sent) and sent.result is pending.result:
            self._sent[dedup_key] = (
                sent.expires_at_ms,
                receipt.queue_id,
                receipt.queue_offset,
                receipt.delayed,
            )

    def _expire(self, now_ms: int) -> None:
        sent = self._sent
        limit = self._settings.send_dedup_max_entries
        while sent:
            key, oldest = next(iter(sent.items()))
            expires_at_ms = oldest[0] if isinstance(oldest, tuple) else oldest.expires_at_ms
            if expires_at_ms > now_ms and len(sent) < limit:
                break
            if isinstance(oldest, _Sent):
                break  # still in progress: it stays (the table overshoots by the in-flight sends)
            del sent[key]

    def _validate(self, topic: TopicConfig, message: Sendable) -> None:
        if not topic.perm & Permission.WRITE:
            raise errors.TopicNotWritable(f"topic {topic.name!r} is not writable")
        if message.kind in (MessageKind.TRANSACTION, MessageKind.UNSUPPORTED):
            raise errors.Unsupported(f"{message.kind.value} messages are not supported")
        if message.kind not in accepted_kinds(topic.message_type):
            raise errors.MessageTypeConflict(
                f"topic {topic.name!r} accepts {topic.message_type.value} messages, "
                f"not {message.kind.value}"
            )
        if isinstance(message, EncodedMessage):
            if message.kind not in _FRONT_KINDS:
                raise errors.MessageCorrupted(f"an encoded message cannot be {message.kind.value}")
            body_size = message.body_size
        else:
            body_size = len(message.body)
        if not body_size:
            raise EmptyBody("message body is empty")
        if body_size > self._settings.max_body_bytes:
            raise MessageTooLarge(
                f"message body of {body_size} bytes exceeds {self._settings.max_body_bytes} bytes"
            )
        if not message.message_id.strip():
            raise errors.IllegalMessage("message id is blank", field="message_id")
        if message.tag is not None and (
            not message.tag.strip() or "|" in message.tag or len(message.tag) > MAX_TAG_CHARS
        ):
            raise errors.IllegalMessage(f"illegal tag {message.tag!r}", field="tag")
        if not isinstance(message, EncodedMessage) and any(
            not key.strip() or " " in key for key in message.keys
        ):
            raise errors.IllegalMessage("message keys must be non-blank words", field="keys")
        group = message.message_group
        if message.kind is MessageKind.FIFO and (
            group is None or not group.strip() or len(group) > MAX_MESSAGE_GROUP_CHARS
        ):
            raise errors.IllegalMessage("FIFO messages need a message group", field="message_group")
        if isinstance(message, EncodedMessage):  # keys and property names: checked by its encoder
            self._check_property_count(message.user_properties)
            self._check_property_bytes(message.user_properties_bytes)
            return
        if message.kind is MessageKind.DELAY:
            deliver_ms = message.delivery_timestamp_ms
            if deliver_ms is None:
                raise errors.IllegalDeliveryTime("DELAY messages need a delivery timestamp")
            if deliver_ms - self._clock() > self._settings.max_delay_ms:
                raise errors.IllegalDeliveryTime("delivery timestamp is too far in the future")
        self._validate_properties(message)

    def _validate_properties(self, message: OutgoingMessage) -> None:
        props = message.user_properties or {}
        self._check_property_count(len(props))
        size = 0
        for key, value in props.items():
            if not key or key in messages.RESERVED_PROPERTY_KEYS:
                raise errors.IllegalMessage(
                    f"property key {key!r} is empty or reserved", field="property_key"
                )
            size += len(key.encode()) + len(value.encode())
        self._check_property_bytes(size)

    def _check_property_count(self, count: int) -> None:
        if count > self._settings.max_user_properties:
            raise errors.PropertiesTooLarge(
                f"{count} user properties exceed {self._settings.max_user_properties}"
            )

    def _check_property_bytes(self, size: int) -> None:
        if size > self._settings.max_user_properties_bytes:
            raise errors.PropertiesTooLarge(
                f"user properties of {size} bytes exceed "
                f"{self._settings.max_user_properties_bytes} bytes"
            )

    def _queue_for(self, topic: TopicConfig, message: Sendable) -> int:
        queues = max(1, topic.write_queue_nums)
        if message.message_group:
            return zlib.crc32(message.message_group.encode()) % queues
        self._round_robin += 1
        return self._round_robin % queues

    def _record(self, pending: _Pending, now_ms: int) -> tuple[MessageToAppend | bytes, int | None]:
        """Step 5 for one message: what to store (a message, or an encoded message's record),
        and its queue when it is held as DELAY."""
        topic, message = pending.topic, pending.message
        queue_id = self._queue_for(topic, message)
        if isinstance(message, EncodedMessage):
            return fmt.with_queue_id(message.record, queue_id), None
        properties = messages.to_store_properties(message)
        deliver_ms = message.delivery_timestamp_ms
        if message.kind is MessageKind.DELAY and deliver_ms is not None and deliver_ms > now_ms:
            record = revivelog.DelayRecord(
                topic=topic.name,
                queue_id=queue_id,
                deliver_ms=deliver_ms,
                body=message.body,
                properties=properties,
                born_timestamp_ms=message.born_timestamp_ms,
                born_host=message.born_host,
            )
            revive_queue_id = zlib.crc32(message.message_id.encode()) % max(
                1, self._settings.revive_queue_num
            )
            delay = revivelog.delay_message(
                self._settings.cluster, record, revive_queue_id=revive_queue_id
            )
            return delay, queue_id
        stored = MessageToAppend(
            topic=topic.name,
            queue_id=queue_id,
            body=message.body,
            properties=properties,
            born_timestamp_ms=message.born_timestamp_ms,
            born_host=message.born_host,
        )
        return stored, None

    async def _store_append(self, items: Sequence[MessageToAppend | bytes]) -> list[AppendResult]:
        """One store append of ``items``: as records when any is one, else as messages."""
        as_messages = [item for item in items if isinstance(item, MessageToAppend)]
        if len(as_messages) == len(items):
            return await self._store.append(as_messages)
        records = [
            item if isinstance(item, bytes) else appending.encode_unplaced(item) for item in items
        ]
        return await self._store.append_records(records)

    async def _append(self, batch: Sequence[_Pending], now_ms: int) -> None:
        """Step 5: one append for the request's new messages; resolves their futures."""
        try:
            records = [self._record(pending, now_ms) for pending in batch]
            results = await self._store_append([record for record, _ in records])
        except BaseException as exc:
            for pending in batch:
                self._forget(pending.message, pending.result)
                if isinstance(exc, asyncio.CancelledError):
                    pending.result.cancel()
                elif not pending.result.done():
                    pending.result.set_exception(exc)
                    pending.result.exception()  # retrieved: no warning if nobody waits
            if not isinstance(exc, Exception):
                raise
            return
        for pending, (_, delayed_queue), result in zip(batch, records, results, strict=True):
            message = pending.message
            if delayed_queue is not None:
                receipt = SendReceipt(
                    message_id=message.message_id,
                    topic=pending.topic.name,
                    queue_id=delayed_queue,
                    queue_offset=0,
                    delayed=True,
                )
            else:
                receipt = SendReceipt(
                    message_id=message.message_id,
                    topic=pending.topic.name,
                    queue_id=result.queue_id,
                    queue_offset=result.queue_offset,
                )
            self._settle(pending, receipt)
            if not pending.result.done():
                pending.result.set_result(receipt)
