"""Pure conversions between ``popbroker.store.api`` values and ``store_pb2`` messages.

The only place that knows both shapes: the server and the client call
``<value>_to_pb`` and ``<value>_from_pb`` and never touch a field themselves.

Rules:

* every api field has a proto field of the same name (timestamps in ms);
* enums map by name through explicit tables; the proto's UNSPECIFIED zero, or a
  number this side does not know, is refused with ``errors.InvalidArgument`` --
  a peer that forgot to set an enum never gets a silent default;
* ``Permission`` travels as its RocketMQ bit value (0 is valid);
* values out of a proto field's range (an ``int32`` queue id of 2**40) raise
  ``errors.InvalidArgument`` from ``*_to_pb``, not protobuf's ``ValueError``;
* a ``StoredMessage`` read with its commit-log record travels as that record alone
  (``record``, the other fields unset); the receiver verifies and decodes it, and a
  record that fails is ``errors.CorruptStore``, as a damaged record on disk is.

Callers: ``popbroker.store.wire.server`` and ``popbroker.store.wire.client``.
"""

from __future__ import annotations

import contextlib
import enum
import struct
from collections.abc import Iterator, Mapping, Sequence
from typing import TypeVar

from popbroker.store import api, errors
from popbroker.store import format as fmt
from popbroker.store.wire import store_pb2 as pb

_E = TypeVar("_E", bound=enum.Enum)


@contextlib.contextmanager
def refusing_bad_values(what: str) -> Iterator[None]:
    """Turn protobuf's (and ``struct``'s) range and type errors while building ``what`` into
    ``InvalidArgument``."""
    try:
        yield
    except (ValueError, TypeError, struct.error) as exc:
        raise errors.InvalidArgument(f"{what}: {exc}") from exc


def _enum_from_pb(table: Mapping[int, _E], number: int, field: str) -> _E:
    try:
        return table[number]
    except KeyError:
        raise errors.InvalidArgument(f"{field}: unspecified or unknown value {number}") from None


_FLUSH_MODE_TO_PB: dict[api.FlushMode, pb.FlushMode.ValueType] = {
    api.FlushMode.ASYNC: pb.FLUSH_MODE_ASYNC,
    api.FlushMode.SYNC: pb.FLUSH_MODE_SYNC,
}
_MESSAGE_TYPE_TO_PB: dict[api.MessageType, pb.MessageType.ValueType] = {
    api.MessageType.NORMAL: pb.MESSAGE_TYPE_NORMAL,
    api.MessageType.FIFO: pb.MESSAGE_TYPE_FIFO,
    api.MessageType.DELAY: pb.MESSAGE_TYPE_DELAY,
    api.MessageType.TRANSACTION: pb.MESSAGE_TYPE_TRANSACTION,
    api.MessageType.MIXED: pb.MESSAGE_TYPE_MIXED,
}
_CONSUME_MODE_TO_PB: dict[api.ConsumeMode, pb.ConsumeMode.ValueType] = {
    api.ConsumeMode.PULL: pb.CONSUME_MODE_PULL,
    api.ConsumeMode.POP: pb.CONSUME_MODE_POP,
}
_READ_STATUS_TO_PB: dict[api.ReadStatus, pb.ReadStatus.ValueType] = {
    api.ReadStatus.FOUND: pb.READ_STATUS_FOUND,
    api.ReadStatus.NO_MATCHED_MESSAGE: pb.READ_STATUS_NO_MATCHED_MESSAGE,
    api.ReadStatus.NO_MESSAGE_IN_QUEUE: pb.READ_STATUS_NO_MESSAGE_IN_QUEUE,
    api.ReadStatus.OFFSET_TOO_SMALL: pb.READ_STATUS_OFFSET_TOO_SMALL,
    api.ReadStatus.OFFSET_OVERFLOW_ONE: pb.READ_STATUS_OFFSET_OVERFLOW_ONE,
    api.ReadStatus.OFFSET_OVERFLOW_BADLY: pb.READ_STATUS_OFFSET_OVERFLOW_BADLY,
    api.ReadStatus.NO_SUCH_QUEUE: pb.READ_STATUS_NO_SUCH_QUEUE,
}
_FLUSH_MODE_FROM_PB = {int(v): k for k, v in _FLUSH_MODE_TO_PB.items()}
_MESSAGE_TYPE_FROM_PB = {int(v): k for k, v in _MESSAGE_TYPE_TO_PB.items()}
_CONSUME_MODE_FROM_PB = {int(v): k for k, v in _CONSUME_MODE_TO_PB.items()}
_READ_STATUS_FROM_PB = {int(v): k for k, v in _READ_STATUS_TO_PB.items()}


# ---------------------------------------------------------------- store info


def info_to_pb(info: api.StoreInfo) -> pb.StoreInfo:
    with refusing_bad_values("StoreInfo"):
        return pb.StoreInfo(
            cluster=info.cluster,
            broker_name=info.broker_name,
            config_epoch=info.config_epoch,
            flush_mode=_FLUSH_MODE_TO_PB[info.flush_mode],
            min_physical_offset=info.min_physical_offset,
            max_physical_offset=info.max_physical_offset,
            flushed_physical_offset=info.flushed_physical_offset,
            writable=info.writable,
            last_error=info.last_error,
            segment_bytes=info.segment_bytes,
            cq_entries_per_file=info.cq_entries_per_file,
        )


def info_from_pb(msg: pb.StoreInfo) -> api.StoreInfo:
    return api.StoreInfo(
        cluster=msg.cluster,
        broker_name=msg.broker_name,
        config_epoch=msg.config_epoch,
        flush_mode=_enum_from_pb(_FLUSH_MODE_FROM_PB, msg.flush_mode, "flush_mode"),
        min_physical_offset=msg.min_physical_offset,
        max_physical_offset=msg.max_physical_offset,
        flushed_physical_offset=msg.flushed_physical_offset,
        writable=msg.writable,
        last_error=msg.last_error,
        segment_bytes=msg.segment_bytes,
        cq_entries_per_file=msg.cq_entries_per_file,
    )


# ---------------------------------------------------------------- messages


_PACKED_RESULT = struct.Struct(">iqqIq")  # queue id, queue offset, physical, size, store time


def pack_append_results(results: Sequence[api.AppendResult]) -> bytes:
    """``AppendResponse.packed_results`` (see the proto); topics are left out."""
    pack = _PACKED_RESULT.pack
    with refusing_bad_values("AppendResult"):
        return b"".join(
            pack(r.queue_id, r.queue_offset, r.physical_offset, r.size, r.store_timestamp_ms)
            for r in results
        )


def unpack_append_results(packed: bytes, topics: Sequence[str]) -> list[api.AppendResult]:
    """The results of ``pack_append_results``, one per topic in ``topics`` (request order)."""
    if len(packed) != _PACKED_RESULT.size * len(topics):
        raise errors.StoreError(
            f"append answered {len(packed)} bytes of results for {len(topics)} records"
        )
    return [
        api.AppendResult(topic, queue_id, queue_offset, physical, size, stored)
        for topic, (queue_id, queue_offset, physical, size, stored) in zip(
            topics, _PACKED_RESULT.iter_unpack(packed), strict=True
        )
    ]


def stored_message_to_pb(message: api.StoredMessage) -> pb.StoredMessage:
    if message.record:
        return pb.StoredMessage(record=message.record)
    with refusing_bad_values("StoredMessage"):
        return pb.StoredMessage(
            topic=message.topic,
            queue_id=message.queue_id,
            queue_offset=message.queue_offset,
            physical_offset=message.physical_offset,
            body=message.body,
            properties=message.properties,
            born_timestamp_ms=message.born_timestamp_ms,
            store_timestamp_ms=message.store_timestamp_ms,
            born_host=message.born_host,
            reconsume_times=message.reconsume_times,
            flags=message.flags,
        )


def stored_message_from_pb(msg: pb.StoredMessage) -> api.StoredMessage:
    if msg.record:
        return _stored_message_from_record(msg.record)
    return api.StoredMessage(
        topic=msg.topic,
        queue_id=msg.queue_id,
        queue_offset=msg.queue_offset,
        physical_offset=msg.physical_offset,
        body=msg.body,
        properties=dict(msg.properties),
        born_timestamp_ms=msg.born_timestamp_ms,
        store_timestamp_ms=msg.store_timestamp_ms,
        born_host=msg.born_host,
        reconsume_times=msg.reconsume_times,
        flags=msg.flags,
    )


def _stored_message_from_record(record: bytes) -> api.StoredMessage:
    try:
        fields = fmt.decode_fields(record, expected_physical_offset=fmt.physical_offset_of(record))
    except fmt.FormatError as exc:
        raise errors.CorruptStore(f"a record read over the store's wire is damaged: {exc}") from exc
    return api.StoredMessage.from_record(record, fields)


def read_result_to_pb(result: api.ReadResult) -> pb.ReadResponse:
    with refusing_bad_values("ReadResult"):
        return pb.ReadResponse(
            status=_READ_STATUS_TO_PB[result.status],
            messages=[stored_message_to_pb(m) for m in result.messages],
            next_queue_offset=result.next_queue_offset,
            min_queue_offset=result.min_queue_offset,
            max_queue_offset=result.max_queue_offset,
        )


def read_result_from_pb(msg: pb.ReadResponse) -> api.ReadResult:
    return api.ReadResult(
        status=_enum_from_pb(_READ_STATUS_FROM_PB, msg.status, "status"),
        messages=tuple(stored_message_from_pb(m) for m in msg.messages),
        next_queue_offset=msg.next_queue_offset,
        min_queue_offset=msg.min_queue_offset,
        max_queue_offset=msg.max_queue_offset,
    )


def bounds_to_pb(bounds: api.QueueBounds) -> pb.QueueBounds:
    with refusing_bad_values("QueueBounds"):
        return pb.QueueBounds(
            topic=bounds.topic,
            queue_id=bounds.queue_id,
            min_queue_offset=bounds.min_queue_offset,
            max_queue_offset=bounds.max_queue_offset,
        )


def bounds_from_pb(msg: pb.QueueBounds) -> api.QueueBounds:
    return api.QueueBounds(
        topic=msg.topic,
        queue_id=msg.queue_id,
        min_queue_offset=msg.min_queue_offset,
        max_queue_offset=msg.max_queue_offset,
    )


def arrival_to_pb(arrival: api.Arrival) -> pb.Arrival:
    with refusing_bad_values("Arrival"):
        return pb.Arrival(
            topic=arrival.topic,
            queue_id=arrival.queue_id,
            queue_offset=arrival.queue_offset,
            tag_hash=arrival.tag_hash,
        )


def arrival_from_pb(msg: pb.Arrival) -> api.Arrival:
    return api.Arrival(
        topic=msg.topic,
        queue_id=msg.queue_id,
        queue_offset=msg.queue_offset,
        tag_hash=msg.tag_hash,
    )


# ---------------------------------------------------------------- offsets


def committed_offset_to_pb(row: api.CommittedOffset) -> pb.CommittedOffset:
    with refusing_bad_values("CommittedOffset"):
        return pb.CommittedOffset(
            group=row.group, topic=row.topic, queue_id=row.queue_id, queue_offset=row.queue_offset
        )


def committed_offset_from_pb(msg: pb.CommittedOffset) -> api.CommittedOffset:
    return api.CommittedOffset(
        group=msg.group, topic=msg.topic, queue_id=msg.queue_id, queue_offset=msg.queue_offset
    )


# ---------------------------------------------------------------- configuration


def topic_to_pb(topic: api.TopicConfig) -> pb.TopicConfig:
    with refusing_bad_values("TopicConfig"):
        return pb.TopicConfig(
            name=topic.name,
            read_queue_nums=topic.read_queue_nums,
            write_queue_nums=topic.write_queue_nums,
            perm=int(topic.perm),
            message_type=_MESSAGE_TYPE_TO_PB[topic.message_type],
        )


def topic_from_pb(msg: pb.TopicConfig) -> api.TopicConfig:
    try:
        perm = api.Permission(msg.perm)
    except ValueError:
        raise errors.InvalidArgument(f"perm: unknown permission bits {msg.perm}") from None
    return api.TopicConfig(
        name=msg.name,
        read_queue_nums=msg.read_queue_nums,
        write_queue_nums=msg.write_queue_nums,
        perm=perm,
        message_type=_enum_from_pb(_MESSAGE_TYPE_FROM_PB, msg.message_type, "message_type"),
    )


def retry_policy_to_pb(policy: api.RetryPolicy) -> pb.RetryPolicy:
    with refusing_bad_values("RetryPolicy"):
        return pb.RetryPolicy(
            kind=policy.kind,
            initial_backoff_ms=policy.initial_backoff_ms,
            max_backoff_ms=policy.max_backoff_ms,
            multiplier=policy.multiplier,
            customized_backoff_ms=policy.customized_backoff_ms,
        )


def retry_policy_from_pb(msg: pb.RetryPolicy) -> api.RetryPolicy:
    return api.RetryPolicy(
        kind=msg.kind,
        initial_backoff_ms=msg.initial_backoff_ms,
        max_backoff_ms=msg.max_backoff_ms,
        multiplier=msg.multiplier,
        customized_backoff_ms=tuple(msg.customized_backoff_ms),
    )


def group_to_pb(group: api.GroupConfig) -> pb.GroupConfig:
    with refusing_bad_values("GroupConfig"):
        return pb.GroupConfig(
            name=group.name,
            max_reconsume_times=group.max_reconsume_times,
            fifo=group.fifo,
            consume_enable=group.consume_enable,
            retry_policy=retry_policy_to_pb(group.retry_policy),
        )


def group_from_pb(msg: pb.GroupConfig) -> api.GroupConfig:
    if not msg.HasField("retry_policy"):
        raise errors.InvalidArgument("retry_policy: missing")
    return api.GroupConfig(
        name=msg.name,
        max_reconsume_times=msg.max_reconsume_times,
        fifo=msg.fifo,
        consume_enable=msg.consume_enable,
        retry_policy=retry_policy_from_pb(msg.retry_policy),
    )


def consume_mode_to_pb(mode: api.ConsumeModeConfig) -> pb.ConsumeModeConfig:
    with refusing_bad_values("ConsumeModeConfig"):
        return pb.ConsumeModeConfig(
            group=mode.group,
            topic=mode.topic,
            mode=_CONSUME_MODE_TO_PB[mode.mode],
            pop_share_queue_num=mode.pop_share_queue_num,
        )


def consume_mode_from_pb(msg: pb.ConsumeModeConfig) -> api.ConsumeModeConfig:
    return api.ConsumeModeConfig(
        group=msg.group,
        topic=msg.topic,
        mode=_enum_from_pb(_CONSUME_MODE_FROM_PB, msg.mode, "mode"),
        pop_share_queue_num=msg.pop_share_queue_num,
    )


def member_to_pb(member: api.ClusterMember) -> pb.ClusterMember:
    with refusing_bad_values("ClusterMember"):
        return pb.ClusterMember(broker_name=member.broker_name, endpoint=member.endpoint)


def member_from_pb(msg: pb.ClusterMember) -> api.ClusterMember:
    return api.ClusterMember(broker_name=msg.broker_name, endpoint=msg.endpoint)
