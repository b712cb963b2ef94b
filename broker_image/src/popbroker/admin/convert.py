"""Admin protos <-> store values, and the validation of every request field (pure).

The servicer turns each request into store values here *before* it changes
anything; whatever does not validate raises an
:class:`~popbroker.admin.errors.AdminRefusal` naming the field and the rule:

* names follow the store's rules (``^[%a-zA-Z0-9_-]{1,127}$``, no reserved
  system prefix) -- ``BAD_NAME``;
* counts are in range: queues ``0..1024`` with at least one, max reconsume
  times ``0..1000``, ``pop_share_queue_num >= 0`` -- ``BAD_COUNT``;
* enums are set: an UNSPECIFIED or unknown number is refused -- ``BAD_ENUM``;
* a retry policy is coherent (back-offs ``0..24 h``, ``initial <= max``,
  ``1 <= multiplier <= 100``, 1..64 customized steps) -- ``BAD_RETRY_POLICY``;
* members have distinct non-empty names and ``HOST:PORT`` endpoints -- ``BAD_MEMBER``.

Queue shrinking is a state check, not a field check: :func:`check_no_shrink`.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping, Sequence
from typing import TypeVar

from popbroker.admin.errors import FailedPrecondition, InvalidArgument
from popbroker.inspect import inspecting
from popbroker.store import api, names
from popbroker.store import errors as store_errors
from popbroker.store.metadata import MAX_QUEUES
from popfleet_api.admin.v1 import admin_pb2 as pb

MAX_RECONSUME_TIMES = 1000
MAX_BACKOFF_MS = 24 * 3600 * 1000
MAX_MULTIPLIER = 100.0
MAX_CUSTOMIZED_STEPS = 64
MAX_MEMBERS = 1024
BROKER_NAME_PATTERN = re.compile(r"[a-zA-Z0-9._-]{1,253}")

_E = TypeVar("_E", bound=enum.Enum)


def _enum_from_pb(table: Mapping[int, _E], number: int, field: str) -> _E:
    try:
        return table[number]
    except KeyError:
        raise InvalidArgument(
            f"{field}: unspecified or unknown value {number}", reason="BAD_ENUM"
        ) from None


def _invert(table: Mapping[_E, int]) -> dict[int, _E]:
    return {number: value for value, number in table.items()}


FLUSH_MODE_TO_PB: dict[api.FlushMode, int] = {
    api.FlushMode.ASYNC: pb.FLUSH_MODE_ASYNC,
    api.FlushMode.SYNC: pb.FLUSH_MODE_SYNC,
}
PERMISSION_TO_PB: dict[api.Permission, int] = {
    api.Permission.NONE: pb.PERMISSION_NONE,
    api.Permission.WRITE: pb.PERMISSION_WRITE,
    api.Permission.READ: pb.PERMISSION_READ,
    api.Permission.READ_WRITE: pb.PERMISSION_READ_WRITE,
}
MESSAGE_TYPE_TO_PB: dict[api.MessageType, int] = {
    api.MessageType.NORMAL: pb.MESSAGE_TYPE_NORMAL,
    api.MessageType.FIFO: pb.MESSAGE_TYPE_FIFO,
    api.MessageType.DELAY: pb.MESSAGE_TYPE_DELAY,
    api.MessageType.TRANSACTION: pb.MESSAGE_TYPE_TRANSACTION,
    api.MessageType.MIXED: pb.MESSAGE_TYPE_MIXED,
}
CONSUME_MODE_TO_PB: dict[api.ConsumeMode, int] = {
    api.ConsumeMode.PULL: pb.CONSUME_MODE_PULL,
    api.ConsumeMode.POP: pb.CONSUME_MODE_POP,
}
# The store keeps the retry kind as a lower-case word.
RETRY_KIND_TO_PB: dict[str, int] = {
    "exponential": pb.RETRY_KIND_EXPONENTIAL,
    "customized": pb.RETRY_KIND_CUSTOMIZED,
}
_PERMISSION_FROM_PB = _invert(PERMISSION_TO_PB)
_MESSAGE_TYPE_FROM_PB = _invert(MESSAGE_TYPE_TO_PB)
_CONSUME_MODE_FROM_PB = _invert(CONSUME_MODE_TO_PB)
_RETRY_KIND_FROM_PB = {number: kind for kind, number in RETRY_KIND_TO_PB.items()}


# ---------------------------------------------------------------- names


def check_name(name: str, *, kind: str) -> str:
    """``name`` if it is a legal user topic/group name, else ``InvalidArgument`` (BAD_NAME)."""
    try:
        return names.validate_name(name, kind=kind)
    except store_errors.InvalidName as exc:
        raise InvalidArgument(str(exc), reason="BAD_NAME") from None


def check_count(value: int, *, field: str, low: int = 0, high: int = 2**31 - 1) -> int:
    if not low <= value <= high:
        raise InvalidArgument(f"{field} {value} out of range {low}..{high}", reason="BAD_COUNT")
    return value


# ---------------------------------------------------------------- topics


def topic_from_pb(message: pb.Topic) -> api.TopicConfig:
    """The topic a PutTopic asks for (``system`` is output only and ignored)."""
    check_name(message.name, kind="topic")
    check_count(message.read_queue_nums, field="read_queue_nums", high=MAX_QUEUES)
    check_count(message.write_queue_nums, field="write_queue_nums", high=MAX_QUEUES)
    if max(message.read_queue_nums, message.write_queue_nums) == 0:
        raise InvalidArgument("a topic needs at least one queue", reason="BAD_COUNT")
    return api.TopicConfig(
        name=message.name,
        read_queue_nums=message.read_queue_nums,
        write_queue_nums=message.write_queue_nums,
        perm=_enum_from_pb(_PERMISSION_FROM_PB, message.perm, "perm"),
        message_type=_enum_from_pb(_MESSAGE_TYPE_FROM_PB, message.message_type, "message_type"),
    )


def check_no_shrink(current: api.TopicConfig, wanted: api.TopicConfig) -> None:
    """Refuse (FAILED_PRECONDITION, QUEUE_SHRINK) any smaller read or write queue count."""
    if (
        wanted.read_queue_nums < current.read_queue_nums
        or wanted.write_queue_nums < current.write_queue_nums
    ):
        raise FailedPrecondition(
            f"topic {current.name!r} has {current.read_queue_nums} read and "
            f"{current.write_queue_nums} write queues; refusing to shrink to "
            f"{wanted.read_queue_nums} read and {wanted.write_queue_nums} write "
            "(queue counts only grow)",
            reason="QUEUE_SHRINK",
        )


def topic_to_pb(topic: api.TopicConfig) -> pb.Topic:
    return pb.Topic(
        name=topic.name,
        read_queue_nums=topic.read_queue_nums,
        write_queue_nums=topic.write_queue_nums,
        perm=pb.Permission.ValueType(PERMISSION_TO_PB[api.Permission(topic.perm)]),
        message_type=pb.MessageType.ValueType(MESSAGE_TYPE_TO_PB[topic.message_type]),
        system=names.is_system_topic(topic.name),
    )


# ---------------------------------------------------------------- groups


def retry_policy_from_pb(message: pb.RetryPolicy) -> api.RetryPolicy:
    kind = _retry_kind_from_pb(message.kind)
    for field, value in (
        ("initial_backoff_ms", message.initial_backoff_ms),
        ("max_backoff_ms", message.max_backoff_ms),
    ):
        if not 0 <= value <= MAX_BACKOFF_MS:
            raise InvalidArgument(
                f"retry_policy.{field} {value} out of range 0..{MAX_BACKOFF_MS}",
                reason="BAD_RETRY_POLICY",
            )
    steps = tuple(message.customized_backoff_ms)
    if kind == "exponential":
        if message.initial_backoff_ms > message.max_backoff_ms:
            raise InvalidArgument(
                "retry_policy.initial_backoff_ms must not exceed max_backoff_ms",
                reason="BAD_RETRY_POLICY",
            )
        if not (math.isfinite(message.multiplier) and 1.0 <= message.multiplier <= MAX_MULTIPLIER):
            raise InvalidArgument(
                f"retry_policy.multiplier {message.multiplier} out of range 1..{MAX_MULTIPLIER:g}",
                reason="BAD_RETRY_POLICY",
            )
    elif not 1 <= len(steps) <= MAX_CUSTOMIZED_STEPS:
        raise InvalidArgument(
            f"retry_policy.customized_backoff_ms needs 1..{MAX_CUSTOMIZED_STEPS} values",
            reason="BAD_RETRY_POLICY",
        )
    if not all(0 <= step <= MAX_BACKOFF_MS for step in steps):
        raise InvalidArgument(
            f"retry_policy.customized_backoff_ms values must be in 0..{MAX_BACKOFF_MS}",
            reason="BAD_RETRY_POLICY",
        )
    multiplier = message.multiplier if math.isfinite(message.multiplier) else 0.0
    return api.RetryPolicy(
        kind=kind,
        initial_backoff_ms=message.initial_backoff_ms,
        max_backoff_ms=message.max_backoff_ms,
        multiplier=multiplier,
        customized_backoff_ms=steps,
    )


def _retry_kind_from_pb(number: int) -> str:
    try:
        return _RETRY_KIND_FROM_PB[number]
    except KeyError:
        raise InvalidArgument(
            f"retry_policy.kind: unspecified or unknown value {number}", reason="BAD_ENUM"
        ) from None


def group_from_pb(message: pb.Group) -> api.GroupConfig:
    """The group a PutGroup asks for; an unset retry policy is the default one."""
    check_name(message.name, kind="group")
    check_count(message.max_reconsume_times, field="max_reconsume_times", high=MAX_RECONSUME_TIMES)
    policy = (
        retry_policy_from_pb(message.retry_policy)
        if message.HasField("retry_policy")
        else api.RetryPolicy()
    )
    return api.GroupConfig(
        name=message.name,
        max_reconsume_times=message.max_reconsume_times,
        fifo=message.fifo,
        consume_enable=message.consume_enable,
        retry_policy=policy,
    )


def group_to_pb(group: api.GroupConfig) -> pb.Group:
    policy = group.retry_policy
    return pb.Group(
        name=group.name,
        max_reconsume_times=group.max_reconsume_times,
        retry_policy=pb.RetryPolicy(
            kind=pb.RetryKind.ValueType(
                RETRY_KIND_TO_PB.get(policy.kind, pb.RETRY_KIND_EXPONENTIAL)
            ),
            initial_backoff_ms=policy.initial_backoff_ms,
            max_backoff_ms=policy.max_backoff_ms,
            multiplier=policy.multiplier,
            customized_backoff_ms=list(policy.customized_backoff_ms),
        ),
        fifo=group.fifo,
        consume_enable=group.consume_enable,
    )


# ---------------------------------------------------------------- consume modes


def consume_mode_from_pb(request: pb.SetConsumeModeRequest) -> api.ConsumeModeConfig:
    check_name(request.group, kind="group")
    check_name(request.topic, kind="topic")
    mode = _enum_from_pb(_CONSUME_MODE_FROM_PB, request.mode, "mode")
    check_count(request.pop_share_queue_num, field="pop_share_queue_num")
    return api.ConsumeModeConfig(
        group=request.group,
        topic=request.topic,
        mode=mode,
        pop_share_queue_num=request.pop_share_queue_num,
    )


def consume_mode_to_pb(
    mode: api.ConsumeModeConfig, *, explicitly_set: bool
) -> pb.ConsumeModeSetting:
    return pb.ConsumeModeSetting(
        group=mode.group,
        topic=mode.topic,
        mode=pb.ConsumeMode.ValueType(CONSUME_MODE_TO_PB[mode.mode]),
        pop_share_queue_num=mode.pop_share_queue_num,
        explicitly_set=explicitly_set,
    )


# ---------------------------------------------------------------- members


def members_from_pb(members: Sequence[pb.Member]) -> list[api.ClusterMember]:
    if len(members) > MAX_MEMBERS:
        raise InvalidArgument(f"at most {MAX_MEMBERS} members", reason="BAD_MEMBER")
    seen: set[str] = set()
    result = []
    for member in members:
        if not BROKER_NAME_PATTERN.fullmatch(member.broker_name):
            raise InvalidArgument(
                f"member broker name {member.broker_name!r} must match [a-zA-Z0-9._-]{{1,253}}",
                reason="BAD_MEMBER",
            )
        if member.broker_name in seen:
            raise InvalidArgument(
                f"member {member.broker_name!r} is listed twice", reason="BAD_MEMBER"
            )
        check_endpoint(member.endpoint, field=f"member {member.broker_name!r} endpoint")
        seen.add(member.broker_name)
        result.append(api.ClusterMember(broker_name=member.broker_name, endpoint=member.endpoint))
    return result


def check_endpoint(endpoint: str, *, field: str) -> str:
    host, sep, port = endpoint.rpartition(":")
    if (
        not sep
        or not host
        or len(endpoint) > 300
        or any(c.isspace() for c in endpoint)
        or not port.isdigit()
        or not 0 < int(port) < 65536
    ):
        raise InvalidArgument(f"{field} {endpoint!r} is not HOST:PORT", reason="BAD_MEMBER")
    return endpoint


def member_to_pb(member: api.ClusterMember) -> pb.Member:
    return pb.Member(broker_name=member.broker_name, endpoint=member.endpoint)


# ---------------------------------------------------------------- read models (popbroker.inspect)


def group_offsets_to_pb(offsets: inspecting.GroupOffsets) -> pb.GetOffsetsResponse:
    response = pb.GetOffsetsResponse(group=offsets.group, now_ms=offsets.now_ms)
    for queue in offsets.queues:
        row = pb.QueueOffsets(
            topic=queue.topic,
            queue_id=queue.queue_id,
            min_queue_offset=queue.min_queue_offset,
            max_queue_offset=queue.max_queue_offset,
        )
        if queue.retry_of is not None:
            row.retry_of = queue.retry_of
        if queue.committed_queue_offset is not None:
            row.committed_queue_offset = queue.committed_queue_offset
        if queue.in_flight_messages is not None:
            row.in_flight_messages = queue.in_flight_messages
        if queue.oldest_unconsumed_store_time_ms is not None:
            row.oldest_unconsumed_store_time_ms = queue.oldest_unconsumed_store_time_ms
        response.queues.append(row)
    return response


def revive_stats_to_pb(stats: inspecting.ReviveStats) -> pb.GetReviveStatsResponse:
    response = pb.GetReviveStatsResponse(revive_topic=stats.revive_topic, now_ms=stats.now_ms)
    for queue in stats.queues:
        out = pb.ReviveQueueStats(
            revive_queue_id=queue.revive_queue_id,
            min_queue_offset=queue.min_queue_offset,
            max_queue_offset=queue.max_queue_offset,
            lag_messages=queue.lag_messages,
        )
        if queue.revive_queue_offset is not None:
            out.revive_queue_offset = queue.revive_queue_offset
        if queue.lag_ms is not None:
            out.lag_ms = queue.lag_ms
        ledger = queue.ledger
        if ledger is not None:
            out.ledger.CopyFrom(
                pb.ReviveLedgerStats(
                    pending_checkpoints=ledger.pending,
                    reviving=ledger.in_flight,
                    resolved=ledger.resolved,
                    orphan_acks=ledger.orphan_acks,
                    duplicate_acks=ledger.duplicate_acks,
                    bogus_ack_offsets=ledger.bogus_ack_offsets,
                    duplicate_checkpoints=ledger.duplicate_cks,
                    other_records=ledger.other_records,
                )
            )
        response.queues.append(out)
    for group in stats.groups:
        response.groups.append(
            pb.GroupRetryStats(
                group=group.group,
                retry_messages=group.retry_messages,
                dlq_messages=group.dlq_messages,
            )
        )
    buffer = stats.checkpoint_buffer
    if buffer is not None:
        response.checkpoint_buffer.CopyFrom(
            pb.CheckpointBufferStats(
                in_memory=buffer.in_memory,
                writing=buffer.writing,
                commit_entries=buffer.commit_entries,
            )
        )
    return response
