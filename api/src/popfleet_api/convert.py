"""Pure conversions between :mod:`popfleet_api.models` values and ``admin_pb2`` messages.

The client's only contact with protobuf: :mod:`popfleet_api.client` builds
requests with ``*_to_pb`` and turns answers into values with ``*_from_pb``;
callers never see a message.

Rules:

* enums map by explicit tables; an UNSPECIFIED or unknown number in an answer
  (a broker newer than this client) raises :class:`~popfleet_api.errors.AdminError`
  instead of guessing;
* an unset ``optional`` field becomes ``None``, never 0;
* values that do not fit a proto field (a queue count of 2**40) raise
  :class:`~popfleet_api.errors.InvalidArgument` (reason ``BAD_VALUE``) before
  anything is sent.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

from popfleet_api import errors, models
from popfleet_api.admin.v1 import admin_pb2 as pb

_E = TypeVar("_E", bound=enum.Enum)


@contextlib.contextmanager
def refusing_bad_values(what: str) -> Iterator[None]:
    """Turn protobuf's range and type errors while building ``what`` into ``InvalidArgument``."""
    try:
        yield
    except (ValueError, TypeError) as exc:
        raise errors.InvalidArgument(f"{what}: {exc}", reason="BAD_VALUE") from exc


def _invert(table: Mapping[_E, int]) -> dict[int, _E]:
    return {number: value for value, number in table.items()}


def _from_table(table: Mapping[int, _E], number: int, what: str) -> _E:
    try:
        return table[number]
    except KeyError:
        raise errors.AdminError(f"the broker answered an unknown {what} ({number})") from None


FLUSH_MODE_TO_PB: dict[models.FlushMode, int] = {
    models.FlushMode.ASYNC: pb.FLUSH_MODE_ASYNC,
    models.FlushMode.SYNC: pb.FLUSH_MODE_SYNC,
}
PERMISSION_TO_PB: dict[models.Permission, int] = {
    models.Permission.NONE: pb.PERMISSION_NONE,
    models.Permission.WRITE: pb.PERMISSION_WRITE,
    models.Permission.READ: pb.PERMISSION_READ,
    models.Permission.READ_WRITE: pb.PERMISSION_READ_WRITE,
}
MESSAGE_TYPE_TO_PB: dict[models.MessageType, int] = {
    models.MessageType.NORMAL: pb.MESSAGE_TYPE_NORMAL,
    models.MessageType.FIFO: pb.MESSAGE_TYPE_FIFO,
    models.MessageType.DELAY: pb.MESSAGE_TYPE_DELAY,
    models.MessageType.TRANSACTION: pb.MESSAGE_TYPE_TRANSACTION,
    models.MessageType.MIXED: pb.MESSAGE_TYPE_MIXED,
}
RETRY_KIND_TO_PB: dict[models.RetryKind, int] = {
    models.RetryKind.EXPONENTIAL: pb.RETRY_KIND_EXPONENTIAL,
    models.RetryKind.CUSTOMIZED: pb.RETRY_KIND_CUSTOMIZED,
}
CONSUME_MODE_TO_PB: dict[models.ConsumeMode, int] = {
    models.ConsumeMode.PULL: pb.CONSUME_MODE_PULL,
    models.ConsumeMode.POP: pb.CONSUME_MODE_POP,
}
REVIVE_RECORD_KIND_TO_PB: dict[models.ReviveRecordKind, int] = {
    models.ReviveRecordKind.CHECKPOINT: pb.REVIVE_RECORD_KIND_CHECKPOINT,
    models.ReviveRecordKind.ACK: pb.REVIVE_RECORD_KIND_ACK,
    models.ReviveRecordKind.BATCH_ACK: pb.REVIVE_RECORD_KIND_BATCH_ACK,
    models.ReviveRecordKind.DELAY: pb.REVIVE_RECORD_KIND_DELAY,
    models.ReviveRecordKind.MALFORMED: pb.REVIVE_RECORD_KIND_MALFORMED,
}
_FLUSH_MODE_FROM_PB = _invert(FLUSH_MODE_TO_PB)
_PERMISSION_FROM_PB = _invert(PERMISSION_TO_PB)
_MESSAGE_TYPE_FROM_PB = _invert(MESSAGE_TYPE_TO_PB)
_RETRY_KIND_FROM_PB = _invert(RETRY_KIND_TO_PB)
_CONSUME_MODE_FROM_PB = _invert(CONSUME_MODE_TO_PB)
_REVIVE_RECORD_KIND_FROM_PB = _invert(REVIVE_RECORD_KIND_TO_PB)


def consume_mode_to_pb(mode: models.ConsumeMode) -> pb.ConsumeMode.ValueType:
    return pb.ConsumeMode.ValueType(CONSUME_MODE_TO_PB[mode])


# ---------------------------------------------------------------- broker and members


def broker_info_from_pb(message: pb.BrokerInfo) -> models.BrokerInfo:
    return models.BrokerInfo(
        version=message.version,
        cluster=message.cluster,
        broker_name=message.broker_name,
        ready=message.ready,
        config_epoch=message.config_epoch,
        client_endpoint=message.client_endpoint,
        flush_mode=_from_table(_FLUSH_MODE_FROM_PB, message.flush_mode, "flush mode"),
        revive_queue_num=message.revive_queue_num,
        last_error=message.last_error,
        now_ms=message.now_ms,
    )


def member_to_pb(member: models.Member) -> pb.Member:
    with refusing_bad_values("member"):
        return pb.Member(broker_name=member.broker_name, endpoint=member.endpoint)


def member_from_pb(message: pb.Member) -> models.Member:
    return models.Member(broker_name=message.broker_name, endpoint=message.endpoint)


# ---------------------------------------------------------------- topics and groups


def topic_to_pb(topic: models.Topic) -> pb.Topic:
    with refusing_bad_values(f"topic {topic.name!r}"):
        return pb.Topic(
            name=topic.name,
            read_queue_nums=topic.read_queue_nums,
            write_queue_nums=topic.write_queue_nums,
            perm=pb.Permission.ValueType(PERMISSION_TO_PB[topic.perm]),
            message_type=pb.MessageType.ValueType(MESSAGE_TYPE_TO_PB[topic.message_type]),
            system=topic.system,
        )


def topic_from_pb(message: pb.Topic) -> models.Topic:
    return models.Topic(
        name=message.name,
        read_queue_nums=message.read_queue_nums,
        write_queue_nums=message.write_queue_nums,
        perm=_from_table(_PERMISSION_FROM_PB, message.perm, "permission"),
        message_type=_from_table(_MESSAGE_TYPE_FROM_PB, message.message_type, "message type"),
        system=message.system,
    )


def retry_policy_to_pb(policy: models.RetryPolicy) -> pb.RetryPolicy:
    with refusing_bad_values("retry policy"):
        return pb.RetryPolicy(
            kind=pb.RetryKind.ValueType(RETRY_KIND_TO_PB[policy.kind]),
            initial_backoff_ms=policy.initial_backoff_ms,
            max_backoff_ms=policy.max_backoff_ms,
            multiplier=policy.multiplier,
            customized_backoff_ms=list(policy.customized_backoff_ms),
        )


def retry_policy_from_pb(message: pb.RetryPolicy) -> models.RetryPolicy:
    return models.RetryPolicy(
        kind=_from_table(_RETRY_KIND_FROM_PB, message.kind, "retry kind"),
        initial_backoff_ms=message.initial_backoff_ms,
        max_backoff_ms=message.max_backoff_ms,
        multiplier=message.multiplier,
        customized_backoff_ms=tuple(message.customized_backoff_ms),
    )


def group_to_pb(group: models.Group) -> pb.Group:
    with refusing_bad_values(f"group {group.name!r}"):
        return pb.Group(
            name=group.name,
            max_reconsume_times=group.max_reconsume_times,
            retry_policy=retry_policy_to_pb(group.retry_policy),
            fifo=group.fifo,
            consume_enable=group.consume_enable,
        )


def group_from_pb(message: pb.Group) -> models.Group:
    return models.Group(
        name=message.name,
        max_reconsume_times=message.max_reconsume_times,
        retry_policy=retry_policy_from_pb(message.retry_policy),
        fifo=message.fifo,
        consume_enable=message.consume_enable,
    )


def consume_mode_setting_from_pb(message: pb.ConsumeModeSetting) -> models.ConsumeModeSetting:
    return models.ConsumeModeSetting(
        group=message.group,
        topic=message.topic,
        mode=_from_table(_CONSUME_MODE_FROM_PB, message.mode, "consume mode"),
        pop_share_queue_num=message.pop_share_queue_num,
        explicitly_set=message.explicitly_set,
    )


# ---------------------------------------------------------------- offsets and revive state


def queue_offsets_from_pb(message: pb.QueueOffsets) -> models.QueueOffsets:
    return models.QueueOffsets(
        topic=message.topic,
        queue_id=message.queue_id,
        min_queue_offset=message.min_queue_offset,
        max_queue_offset=message.max_queue_offset,
        committed_queue_offset=(
            message.committed_queue_offset if message.HasField("committed_queue_offset") else None
        ),
        in_flight_messages=(
            message.in_flight_messages if message.HasField("in_flight_messages") else None
        ),
        oldest_unconsumed_store_time_ms=(
            message.oldest_unconsumed_store_time_ms
            if message.HasField("oldest_unconsumed_store_time_ms")
            else None
        ),
        retry_of=message.retry_of,
    )


def group_offsets_from_pb(message: pb.GetOffsetsResponse) -> models.GroupOffsets:
    return models.GroupOffsets(
        group=message.group,
        queues=tuple(queue_offsets_from_pb(q) for q in message.queues),
        now_ms=message.now_ms,
    )


def ledger_stats_from_pb(message: pb.ReviveLedgerStats) -> models.ReviveLedgerStats:
    return models.ReviveLedgerStats(
        pending_checkpoints=message.pending_checkpoints,
        reviving=message.reviving,
        resolved=message.resolved,
        orphan_acks=message.orphan_acks,
        duplicate_acks=message.duplicate_acks,
        bogus_ack_offsets=message.bogus_ack_offsets,
        duplicate_checkpoints=message.duplicate_checkpoints,
        other_records=message.other_records,
    )


def revive_queue_stats_from_pb(message: pb.ReviveQueueStats) -> models.ReviveQueueStats:
    return models.ReviveQueueStats(
        revive_queue_id=message.revive_queue_id,
        min_queue_offset=message.min_queue_offset,
        max_queue_offset=message.max_queue_offset,
        revive_queue_offset=(
            message.revive_queue_offset if message.HasField("revive_queue_offset") else None
        ),
        lag_messages=message.lag_messages,
        lag_ms=message.lag_ms,
        ledger=ledger_stats_from_pb(message.ledger) if message.HasField("ledger") else None,
    )


def revive_stats_from_pb(message: pb.GetReviveStatsResponse) -> models.ReviveStats:
    buffer = None
    if message.HasField("checkpoint_buffer"):
        raw = message.checkpoint_buffer
        buffer = models.CheckpointBufferStats(
            in_memory=raw.in_memory, writing=raw.writing, commit_entries=raw.commit_entries
        )
    return models.ReviveStats(
        revive_topic=message.revive_topic,
        queues=tuple(revive_queue_stats_from_pb(q) for q in message.queues),
        groups=tuple(
            models.GroupRetryStats(
                group=g.group, retry_messages=g.retry_messages, dlq_messages=g.dlq_messages
            )
            for g in message.groups
        ),
        checkpoint_buffer=buffer,
        now_ms=message.now_ms,
    )


# ---------------------------------------------------------------- scans


def revive_record_from_pb(message: pb.ReviveRecord) -> models.ReviveRecord:
    kind = _from_table(_REVIVE_RECORD_KIND_FROM_PB, message.kind, "revive record kind")
    body = message.WhichOneof("body")
    checkpoint = ack = delay = None
    if body == "checkpoint":
        ck = message.checkpoint
        checkpoint = models.CheckpointRecord(
            topic=ck.topic,
            group=ck.group,
            queue_id=ck.queue_id,
            start_queue_offset=ck.start_queue_offset,
            pop_time_ms=ck.pop_time_ms,
            invisible_ms=ck.invisible_ms,
            revive_time_ms=ck.revive_time_ms,
            ack_bitmap=ck.ack_bitmap,
            queue_offset_diffs=tuple(ck.queue_offset_diffs),
            queue_offsets=tuple(ck.queue_offsets),
            broker_name=ck.broker_name,
            reput_times=ck.reput_times,
        )
    elif body == "ack":
        raw = message.ack
        ack = models.AckRecord(
            topic=raw.topic,
            group=raw.group,
            queue_id=raw.queue_id,
            start_queue_offset=raw.start_queue_offset,
            pop_time_ms=raw.pop_time_ms,
            broker_name=raw.broker_name if raw.HasField("broker_name") else None,
            ack_queue_offsets=tuple(raw.ack_queue_offsets),
        )
    elif body == "delay":
        delay = models.DelayRecord(
            topic=message.delay.topic,
            queue_id=message.delay.queue_id,
            deliver_time_ms=message.delay.deliver_time_ms,
        )
    return models.ReviveRecord(
        revive_queue_id=message.revive_queue_id,
        queue_offset=message.queue_offset,
        next_queue_offset=message.next_queue_offset,
        store_timestamp_ms=message.store_timestamp_ms,
        kind=kind,
        tag=message.tag,
        checkpoint=checkpoint,
        ack=ack,
        delay=delay,
        malformed_reason=message.malformed_reason if body == "malformed_reason" else "",
    )


def revive_log_page_from_pb(message: pb.ReviveLogPage) -> models.ReviveLogPage:
    return models.ReviveLogPage(
        revive_queue_id=message.revive_queue_id,
        records=tuple(revive_record_from_pb(r) for r in message.records),
        next_queue_offset=message.next_queue_offset,
        min_queue_offset=message.min_queue_offset,
        max_queue_offset=message.max_queue_offset,
        end_of_log=message.end_of_log,
    )


def revive_log_batch_from_pb(message: pb.ReviveLogBatch, *, target: str) -> Any:
    """A ``ReviveLogBatch`` of format ARROW_IPC_V1 as a ``revivebatches.ReviveLogBatch``.

    Bytes that are not such a batch raise :class:`~popfleet_api.errors.DataLoss`.
    """
    from popfleet_api import revivebatches  # noqa: PLC0415 - pyarrow only for batch readers

    try:
        records = revivebatches.from_ipc(message.arrow_ipc, record_count=message.record_count)
    except revivebatches.BatchFormatError as exc:
        raise errors.DataLoss(f"revive log batch: {exc}", target=target) from None
    return revivebatches.ReviveLogBatch(
        revive_queue_id=message.revive_queue_id,
        records=records,
        next_queue_offset=message.next_queue_offset,
        min_queue_offset=message.min_queue_offset,
        max_queue_offset=message.max_queue_offset,
        end_of_log=message.end_of_log,
    )


def offset_table_key_to_pb(key: models.OffsetTableKey) -> pb.OffsetTableKey:
    with refusing_bad_values("offset table key"):
        return pb.OffsetTableKey(group=key.group, topic=key.topic, queue_id=key.queue_id)


def offset_table_key_from_pb(message: pb.OffsetTableKey) -> models.OffsetTableKey:
    return models.OffsetTableKey(
        group=message.group, topic=message.topic, queue_id=message.queue_id
    )


def offset_table_page_from_pb(message: pb.OffsetTablePage) -> models.OffsetTablePage:
    rows = tuple(
        models.OffsetTableRow(
            key=offset_table_key_from_pb(row.key),
            committed_queue_offset=row.committed_queue_offset,
            min_queue_offset=row.min_queue_offset,
            max_queue_offset=row.max_queue_offset,
            queue_exists=row.queue_exists,
            in_flight_messages=(
                row.in_flight_messages if row.HasField("in_flight_messages") else None
            ),
            oldest_unconsumed_store_time_ms=(
                row.oldest_unconsumed_store_time_ms
                if row.HasField("oldest_unconsumed_store_time_ms")
                else None
            ),
        )
        for row in message.rows
    )
    resume = (
        offset_table_key_from_pb(message.resume_after) if message.HasField("resume_after") else None
    )
    return models.OffsetTablePage(rows=rows, resume_after=resume, end_of_table=message.end_of_table)
