"""The values the admin API speaks in: enums and frozen dataclasses, no protobuf.

Callers of :class:`popfleet_api.client.BrokerAdmin` (the operator, the audit
jobs, the CLI, tests) see only these; :mod:`popfleet_api.convert` is the one
place that knows the proto messages behind them. Field names follow the proto
(``popfleet/admin/v1/admin.proto``): ``_ms`` for milliseconds since the epoch or
durations in ms, ``queue_offset`` for an index in a consume queue, and ``None``
wherever the broker answered "unknown" (an unset ``optional`` field).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class FlushMode(enum.Enum):
    ASYNC = "ASYNC"
    SYNC = "SYNC"


class Permission(enum.Enum):
    """Topic permission; ``rocketmq_bits`` is RocketMQ's number for it (6 = read+write)."""

    NONE = "NONE"
    WRITE = "WRITE"
    READ = "READ"
    READ_WRITE = "READ_WRITE"

    @property
    def rocketmq_bits(self) -> int:
        return _PERMISSION_BITS[self]

    @classmethod
    def parse(cls, text: str) -> Permission:
        """Parse a permission, case-insensitive.

        ``READ_WRITE``/``rw``/``6``, ``READ``/``r``/``4``, ``WRITE``/``w``/``2``, ``NONE``/``0``;
        raises ``ValueError`` for anything else.
        """
        value = text.strip().upper().replace("-", "_")
        for perm, aliases in _PERMISSION_ALIASES.items():
            if value == perm.value or value in aliases:
                return perm
        raise ValueError(f"unknown permission {text!r} (READ_WRITE, READ, WRITE or NONE)")


_PERMISSION_BITS = {
    Permission.NONE: 0,
    Permission.WRITE: 2,
    Permission.READ: 4,
    Permission.READ_WRITE: 6,
}
_PERMISSION_ALIASES = {
    Permission.NONE: ("0",),
    Permission.WRITE: ("W", "2"),
    Permission.READ: ("R", "4"),
    Permission.READ_WRITE: ("RW", "6"),
}


class MessageType(enum.Enum):
    NORMAL = "NORMAL"
    FIFO = "FIFO"
    DELAY = "DELAY"
    TRANSACTION = "TRANSACTION"
    MIXED = "MIXED"


class RetryKind(enum.Enum):
    EXPONENTIAL = "EXPONENTIAL"
    CUSTOMIZED = "CUSTOMIZED"


class ConsumeMode(enum.Enum):
    """How a group consumes a topic on a broker (DESIGN §3.3)."""

    PULL = "PULL"
    POP = "POP"


class ReviveRecordKind(enum.Enum):
    CHECKPOINT = "CHECKPOINT"
    ACK = "ACK"
    BATCH_ACK = "BATCH_ACK"
    DELAY = "DELAY"
    MALFORMED = "MALFORMED"


# ---------------------------------------------------------------- broker and members


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    version: str
    cluster: str
    broker_name: str
    ready: bool
    config_epoch: str
    client_endpoint: str
    flush_mode: FlushMode
    revive_queue_num: int
    last_error: str
    now_ms: int


@dataclass(frozen=True, slots=True)
class Member:
    """A broker of the cluster and its advertised client endpoint (``HOST:PORT``)."""

    broker_name: str
    endpoint: str


# ---------------------------------------------------------------- topics and groups


@dataclass(frozen=True, slots=True)
class Topic:
    """A topic; ``system`` is set by the broker for revive-log, retry and DLQ topics."""

    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: Permission = Permission.READ_WRITE
    message_type: MessageType = MessageType.NORMAL
    system: bool = False


@dataclass(frozen=True, slots=True)
class PutTopicResult:
    topic: Topic
    created: bool


@dataclass(frozen=True, slots=True)
class HandOverResult:
    """A leader handed its broker set over: to ``successor``, which leads ``term + 1``."""

    successor: str
    term: int


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Client back-off between deliveries; the defaults are RocketMQ's."""

    kind: RetryKind = RetryKind.EXPONENTIAL
    initial_backoff_ms: int = 1_000
    max_backoff_ms: int = 60_000
    multiplier: float = 2.0
    customized_backoff_ms: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Group:
    name: str
    max_reconsume_times: int = 16
    retry_policy: RetryPolicy = field(default_factory=RetryPolicy)
    fifo: bool = False
    consume_enable: bool = True


@dataclass(frozen=True, slots=True)
class PutGroupResult:
    group: Group
    created: bool


@dataclass(frozen=True, slots=True)
class ConsumeModeSetting:
    """The mode of one (group, topic); ``explicitly_set`` is False for the PULL/0 default."""

    group: str
    topic: str
    mode: ConsumeMode
    pop_share_queue_num: int
    explicitly_set: bool = True


# ---------------------------------------------------------------- offsets


@dataclass(frozen=True, slots=True)
class QueueOffsets:
    """One queue as a group sees it. ``None`` = the broker does not know."""

    topic: str
    queue_id: int
    min_queue_offset: int
    max_queue_offset: int
    committed_queue_offset: int | None
    in_flight_messages: int | None
    oldest_unconsumed_store_time_ms: int | None
    retry_of: str = ""

    @property
    def lag_messages(self) -> int | None:
        """Consumer lag: ``max - max(committed, min)``, never negative; ``None`` (unknown, left
        out of sums) when the group never committed on the queue.

        The one lag definition of popfleet (the audit, the CLI, the docs), Burrow's and
        kafka-lag-exporter's: lag exists only where the group has committed an offset.
        """
        if self.committed_queue_offset is None:
            return None
        return max(
            0, self.max_queue_offset - max(self.min_queue_offset, self.committed_queue_offset)
        )

    @property
    def unconsumed_messages(self) -> int:
        """Messages from the committed offset (or min, when never committed) to max.

        Not lag: what deleting the group or topic, or removing the broker, would leave
        unread -- the operator's deliberately cautious backlog that makes those wait.
        """
        start = self.min_queue_offset
        if self.committed_queue_offset is not None:
            start = max(start, self.committed_queue_offset)
        return max(0, self.max_queue_offset - start)


@dataclass(frozen=True, slots=True)
class GroupOffsets:
    group: str
    queues: tuple[QueueOffsets, ...]
    now_ms: int


# ---------------------------------------------------------------- revive state


@dataclass(frozen=True, slots=True)
class ReviveLedgerStats:
    pending_checkpoints: int
    reviving: int
    resolved: int
    orphan_acks: int
    duplicate_acks: int
    bogus_ack_offsets: int
    duplicate_checkpoints: int
    other_records: int


@dataclass(frozen=True, slots=True)
class CheckpointBufferStats:
    in_memory: int
    writing: int
    commit_entries: int


@dataclass(frozen=True, slots=True)
class ReviveQueueStats:
    revive_queue_id: int
    min_queue_offset: int
    max_queue_offset: int
    revive_queue_offset: int | None
    lag_messages: int
    lag_ms: int
    ledger: ReviveLedgerStats | None


@dataclass(frozen=True, slots=True)
class GroupRetryStats:
    group: str
    retry_messages: int
    dlq_messages: int


@dataclass(frozen=True, slots=True)
class ReviveStats:
    revive_topic: str
    queues: tuple[ReviveQueueStats, ...]
    groups: tuple[GroupRetryStats, ...]
    checkpoint_buffer: CheckpointBufferStats | None
    now_ms: int


# ---------------------------------------------------------------- revive log scan


@dataclass(frozen=True, slots=True)
class CheckpointRecord:
    topic: str
    group: str
    queue_id: int
    start_queue_offset: int
    pop_time_ms: int
    invisible_ms: int
    revive_time_ms: int
    ack_bitmap: int
    queue_offset_diffs: tuple[int, ...]
    queue_offsets: tuple[int, ...]
    broker_name: str
    reput_times: int


@dataclass(frozen=True, slots=True)
class AckRecord:
    """An ``ack`` or ``bAck``; ``broker_name`` None = the local broker."""

    topic: str
    group: str
    queue_id: int
    start_queue_offset: int
    pop_time_ms: int
    broker_name: str | None
    ack_queue_offsets: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class DelayRecord:
    topic: str
    queue_id: int
    deliver_time_ms: int


@dataclass(frozen=True, slots=True)
class ReviveRecord:
    """One record of a revive queue; exactly one of the bodies is set (by ``kind``)."""

    revive_queue_id: int
    queue_offset: int
    next_queue_offset: int
    store_timestamp_ms: int
    kind: ReviveRecordKind
    tag: str
    checkpoint: CheckpointRecord | None = None
    ack: AckRecord | None = None
    delay: DelayRecord | None = None
    malformed_reason: str = ""


@dataclass(frozen=True, slots=True)
class ReviveLogPage:
    revive_queue_id: int
    records: tuple[ReviveRecord, ...]
    next_queue_offset: int
    min_queue_offset: int
    max_queue_offset: int
    end_of_log: bool


# ---------------------------------------------------------------- offset table scan


@dataclass(frozen=True, slots=True, order=True)
class OffsetTableKey:
    """A row of the offset table, and the position to resume a scan after it."""

    group: str
    topic: str
    queue_id: int


@dataclass(frozen=True, slots=True)
class OffsetTableRow:
    key: OffsetTableKey
    committed_queue_offset: int
    min_queue_offset: int
    max_queue_offset: int
    queue_exists: bool
    in_flight_messages: int | None
    oldest_unconsumed_store_time_ms: int | None


@dataclass(frozen=True, slots=True)
class OffsetTablePage:
    rows: tuple[OffsetTableRow, ...]
    resume_after: OffsetTableKey | None
    end_of_table: bool
