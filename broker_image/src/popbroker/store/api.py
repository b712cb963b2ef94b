"""The store API: what the ``popack`` and ``revive`` roles may ask of the ``store`` role.

This module holds the value types that cross the boundary and the ``StoreApi``
Protocol. There are two implementations, and one contract test suite runs against
both (``tests/integration/store/``):

* ``popbroker.store.local.LocalStore`` -- in-process, used by ``popbroker all``
  and by the store role itself;
* ``popbroker.store.wire.client.RemoteStore`` -- the same calls over gRPC on a
  Unix socket in the pod's shared volume (see ``docs/design/`` for why).

Invariants every implementation keeps:

1. ``append`` returns only after the records are written and, in ``SYNC`` flush
   mode, fsynced; the returned queue offsets are dense per (topic, queue).
2. ``read`` sees only dispatched entries: an entry is dispatched after its record
   is written (``ASYNC``) or flushed (``SYNC``), so a reader never sees a record
   that a crash could take back in ``SYNC`` mode.
3. Queue offsets of a (topic, queue) are ``[min, max)``; ``max`` is the next
   offset to be assigned. ``physical_offset`` is a byte position in the commit log.

All methods are ``async`` because both callers are asyncio gRPC servers; the
in-process implementation does its short file I/O inline and awaits only fsync.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from popbroker.values import per_message

if TYPE_CHECKING:
    from popbroker.store.format import RecordFields


class FlushMode(enum.Enum):
    """When an append is acknowledged."""

    ASYNC = "async"  # written to the page cache; a background flusher fsyncs every interval
    SYNC = "sync"  # fsynced (group commit) before the append is acknowledged


class Permission(enum.IntEnum):
    """Topic permission bits, as RocketMQ numbers them (2 = write, 4 = read)."""

    NONE = 0
    WRITE = 2
    READ = 4
    READ_WRITE = 6


class MessageType(enum.Enum):
    """What a topic accepts; mirrors the v2 protocol's message types."""

    NORMAL = "NORMAL"
    FIFO = "FIFO"
    DELAY = "DELAY"
    TRANSACTION = "TRANSACTION"
    MIXED = "MIXED"


class ConsumeMode(enum.Enum):
    """How a group consumes a topic on this broker (DESIGN §3.3)."""

    PULL = "PULL"
    POP = "POP"


@per_message
class MessageToAppend:
    """A record to append. ``properties`` carries tag, keys and the message id."""

    topic: str
    queue_id: int
    body: bytes
    properties: Mapping[str, str] = field(default_factory=dict)
    born_timestamp_ms: int = 0
    born_host: str = ""
    reconsume_times: int = 0
    flags: int = 0


@per_message
class AppendResult:
    """Where an appended record landed."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    store_timestamp_ms: int


MAX_READ_COUNT = 1024  # the most messages one read may ask for


@per_message
class StoredMessage:
    """A record read back from the commit log."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    body: bytes
    properties: Mapping[str, str]
    born_timestamp_ms: int
    store_timestamp_ms: int
    born_host: str
    reconsume_times: int
    flags: int
    # The verified commit-log record these fields were decoded from, when the reader has
    # it at hand (LocalStore's reads and the store's wire both do). The compiled front
    # end builds the client's message from it (popbroker.grpc.front).
    record: bytes = field(default=b"", repr=False, compare=False)

    @classmethod
    def from_record(cls, record: bytes, fields: RecordFields) -> StoredMessage:
        """The message a verified ``record`` holds; ``fields`` are what
        :func:`popbroker.store.format.decode_fields` found in it."""
        (
            physical,
            _size,
            queue_id,
            queue_offset,
            flags,
            born,
            stored,
            reconsume,
            topic,
            host,
            properties,
            body,
        ) = fields
        # positional, in field order: one is made per message read
        return cls(
            topic, queue_id, queue_offset, physical, body, properties, born, stored, host,
            reconsume, flags, record,
        )  # fmt: skip

    @property
    def tag(self) -> str:
        return self.properties.get(PROPERTY_TAGS, "")


class ReadStatus(enum.Enum):
    """Outcome of a read, in the spirit of RocketMQ's GetMessageStatus."""

    FOUND = "FOUND"  # at least one matching message
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"  # entries scanned, none matched the filter
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"  # the queue has never had a message
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"  # below min (retention removed it)
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"  # exactly max: nothing new yet
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"  # beyond max
    NO_SUCH_QUEUE = "NO_SUCH_QUEUE"  # unknown topic or queue id


@dataclass(frozen=True, slots=True)
class MessageColumns:
    """Messages of one queue read in bulk (``LocalStore.read_columns``): one list per field,
    index ``i`` of every list is the same message, in queue-offset order. Messages with the
    same property bytes may share one properties dict: read it, never change it."""

    status: ReadStatus
    queue_offsets: list[int]
    store_timestamps_ms: list[int]
    properties: list[dict[str, str]]
    bodies: list[bytes]
    next_queue_offset: int
    min_queue_offset: int
    max_queue_offset: int

    def tags(self) -> list[str]:
        """Each message's ``TAGS`` property ("" when it has none)."""
        return [p.get(PROPERTY_TAGS, "") for p in self.properties]


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Messages read and where the next read of this queue should start.

    ``next_queue_offset`` may be beyond the last returned message: entries that did
    not match the filter were scanned and skipped (so a CK needs offset diffs).
    """

    status: ReadStatus
    messages: tuple[StoredMessage, ...]
    next_queue_offset: int
    min_queue_offset: int
    max_queue_offset: int


@dataclass(frozen=True, slots=True)
class QueueBounds:
    """``[min_queue_offset, max_queue_offset)`` of one consume queue."""

    topic: str
    queue_id: int
    min_queue_offset: int
    max_queue_offset: int


@dataclass(frozen=True, slots=True)
class Arrival:
    """A dispatched entry, announced to long polling."""

    topic: str
    queue_id: int
    queue_offset: int
    tag_hash: int


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """A topic as the store knows it."""

    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: Permission = Permission.READ_WRITE
    message_type: MessageType = MessageType.NORMAL

    @property
    def queue_nums(self) -> int:
        """Queues that exist on disk: the larger of the read and write counts."""
        return max(self.read_queue_nums, self.write_queue_nums)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Client back-off between deliveries (sent to clients in Telemetry settings)."""

    kind: str = "exponential"  # "exponential" or "customized"
    initial_backoff_ms: int = 1_000
    max_backoff_ms: int = 60_000
    multiplier: float = 2.0
    customized_backoff_ms: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """A consumer group as the store knows it."""

    name: str
    max_reconsume_times: int = 16
    fifo: bool = False
    consume_enable: bool = True
    retry_policy: RetryPolicy = RetryPolicy()


@dataclass(frozen=True, slots=True)
class ConsumeModeConfig:
    """``mode`` and ``pop_share_queue_num`` of one (group, topic)."""

    group: str
    topic: str
    mode: ConsumeMode = ConsumeMode.PULL
    pop_share_queue_num: int = 0


@dataclass(frozen=True, slots=True)
class ClusterMember:
    """A broker of the cluster and the client endpoint it advertises (DESIGN §3.6)."""

    broker_name: str
    endpoint: str  # HOST:PORT


@dataclass(frozen=True, slots=True)
class StoreInfo:
    """Identity and health of a store."""

    cluster: str
    broker_name: str
    config_epoch: str
    flush_mode: FlushMode
    min_physical_offset: int
    max_physical_offset: int
    flushed_physical_offset: int
    writable: bool
    last_error: str = ""
    # The on-disk layout (0: not told), for readers of the same volume
    # (popbroker.store.direct).
    segment_bytes: int = 0
    cq_entries_per_file: int = 0


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """One row of the consumer offset table."""

    group: str
    topic: str
    queue_id: int
    queue_offset: int


# Property keys, as RocketMQ names them, so dumps and handles look familiar.
PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQUE_ID = "UNIQ_KEY"


class StoreApi(Protocol):
    """The store as the other roles see it. See the module docstring for the invariants."""

    async def info(self) -> StoreInfo: ...

    async def append(self, messages: Sequence[MessageToAppend]) -> list[AppendResult]:
        """Append records atomically as a batch (all or none); see invariant 1."""
        ...

    async def append_records(self, records: Sequence[bytes]) -> list[AppendResult]:
        """``append`` of messages the caller already encoded as unplaced records
        (``popbroker.store.appending.encode_unplaced``), checked as their messages would be."""
        ...

    async def read(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        *,
        max_count: int,
        tag_filter: str = "*",
        max_scan: int = 800,
    ) -> ReadResult:
        """Read up to ``max_count`` matching messages, scanning at most ``max_scan`` entries."""
        ...

    async def bounds(self, topic: str, queue_id: int) -> QueueBounds: ...

    def arrivals(self, topic: str | None = None) -> AsyncIterator[Arrival]:
        """Dispatched entries from now on (of ``topic`` only, when given), for long polling
        and revive: hints, not a log.

        Every entry dispatched after the call is announced by itself or by a later entry
        of the same queue: entries dispatched together are announced once per queue, by
        the last of them, and queues in the order they first appear in the batch.
        """
        ...

    # Consumer offsets (committed queue offsets per group).
    # Keyword-only: (group, topic, queue_id) is spelt in another order elsewhere (QueueKey).
    async def commit_offset(
        self, *, group: str, topic: str, queue_id: int, queue_offset: int
    ) -> None: ...

    async def committed_offset(self, *, group: str, topic: str, queue_id: int) -> int | None: ...

    async def committed_offsets(self, group: str | None = None) -> list[CommittedOffset]: ...

    async def delete_offsets(self, group: str, topic: str | None = None) -> None: ...

    # Configuration (persisted atomically with the config epoch).
    async def put_topic(self, topic: TopicConfig) -> TopicConfig: ...

    async def delete_topic(self, name: str) -> None: ...

    async def topics(self) -> list[TopicConfig]: ...

    async def put_group(self, group: GroupConfig) -> GroupConfig: ...

    async def delete_group(self, name: str) -> None: ...

    async def groups(self) -> list[GroupConfig]: ...

    async def put_consume_mode(self, mode: ConsumeModeConfig) -> ConsumeModeConfig: ...

    async def consume_modes(self) -> list[ConsumeModeConfig]: ...

    async def set_members(self, members: Sequence[ClusterMember]) -> None: ...

    async def members(self) -> list[ClusterMember]: ...
