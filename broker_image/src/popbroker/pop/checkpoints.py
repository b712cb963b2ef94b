"""Checkpoints (CKs): one popped batch of one queue, with its ack bitmap.

Purpose: a checkpoint records what one pop handed out from one queue so that
the messages nobody acks can be redelivered after the invisible time
(fact sheet §2.1). A pop over several queues creates one CK per queue, all
with the same ``pop_time_ms`` and ``revive_queue_id``.

Fields: ``topic`` is the topic actually read (may be a retry topic), ``group``
the consumer group, ``queue_id``/``start_queue_offset`` where the read began,
``queue_offset_diffs`` the offsets of the returned messages minus
``start_queue_offset`` (filtered reads are not contiguous, so the first diff
may be > 0 and the diffs may have gaps), ``ack_bitmap`` bit *i* set ⇔ message
*i* acked, ``reput_times`` how often revive retried this CK after a failure.

Invariants (checked on construction, :class:`InvalidCheckpoint` otherwise):
  * ``1 <= count <= 32`` where ``count = len(queue_offset_diffs)``; a CK is
    never empty (the "empty pop" is a commit-queue entry of
    :mod:`popbroker.pop.checkpointbuffer`, not a CK). ``count`` is derived,
    never stored twice.
  * diffs are non-negative and strictly increasing.
  * ``0 <= ack_bitmap < 2**count``.
  * values are immutable: :func:`with_bitmap` returns a new CK and only ever
    *sets* bits (OR) — a bit never un-acks.

Match key: acks find their CK by :class:`CheckpointKey`, the tuple
``(topic, group, queue_id, start_queue_offset, pop_time_ms, broker_name)`` —
never a string concatenation (upstream concatenates without separators, so
queue 1/offset 23 and queue 12/offset 3 collide, fact sheet §2.4).

Callers: :mod:`popbroker.pop.checkpointbuffer` (in-memory CKs),
:mod:`popbroker.pop.records` (revive-log encoding), :mod:`popbroker.pop.reviving`
(revive ledger), :mod:`popbroker.pop.invisibility` (one-message CKs).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple, cast

from popbroker.pop import errors
from popbroker.values import per_message

MAX_CHECKPOINT_MESSAGES = 32


class CheckpointKey(NamedTuple):
    """The tuple an ack is matched by (see the module docstring)."""

    topic: str
    group: str
    queue_id: int
    start_queue_offset: int
    pop_time_ms: int
    broker_name: str


class QueueKey(NamedTuple):
    """One queue of one topic as consumed by one group (``topic@group@queue`` upstream)."""

    topic: str
    group: str
    queue_id: int


@per_message
class Checkpoint:
    """One popped batch of one queue (see the module docstring for fields and invariants)."""

    topic: str
    group: str
    queue_id: int
    start_queue_offset: int
    pop_time_ms: int
    invisible_ms: int
    revive_queue_id: int
    broker_name: str
    queue_offset_diffs: tuple[int, ...]
    ack_bitmap: int = 0
    reput_times: int = 0

    def __post_init__(self) -> None:
        count = len(self.queue_offset_diffs)
        if not 1 <= count <= MAX_CHECKPOINT_MESSAGES:
            raise errors.InvalidCheckpoint(
                f"a checkpoint covers 1..{MAX_CHECKPOINT_MESSAGES} messages, not {count}"
            )
        previous = -1
        for diff in self.queue_offset_diffs:
            if diff <= previous:
                raise errors.InvalidCheckpoint("queue offset diffs must be >= 0 and increasing")
            previous = diff
        if not 0 <= self.ack_bitmap < (1 << count):
            raise errors.InvalidCheckpoint("ack bitmap has bits beyond the message count")
        if self.start_queue_offset < 0 or self.queue_id < 0 or self.revive_queue_id < 0:
            raise errors.InvalidCheckpoint("negative queue offset, queue id or revive queue id")
        if self.pop_time_ms < 0 or self.invisible_ms < 0 or self.reput_times < 0:
            raise errors.InvalidCheckpoint("negative pop time, invisible time or reput times")
        if not self.topic or not self.group or not self.broker_name:
            raise errors.InvalidCheckpoint("empty topic, group or broker name")

    @property
    def count(self) -> int:
        """Number of messages the checkpoint covers (1..32)."""
        return len(self.queue_offset_diffs)

    @property
    def revive_time_ms(self) -> int:
        """When un-acked messages become due for redelivery: pop time + invisible time."""
        return self.pop_time_ms + self.invisible_ms

    @property
    def key(self) -> CheckpointKey:
        """The match key acks use to find this checkpoint."""
        return CheckpointKey(
            topic=self.topic,
            group=self.group,
            queue_id=self.queue_id,
            start_queue_offset=self.start_queue_offset,
            pop_time_ms=self.pop_time_ms,
            broker_name=self.broker_name,
        )

    @property
    def queue_key(self) -> QueueKey:
        """The queue this checkpoint was popped from."""
        return QueueKey(topic=self.topic, group=self.group, queue_id=self.queue_id)

    @property
    def last_queue_offset(self) -> int:
        """Queue offset of the last message of the batch."""
        return self.start_queue_offset + self.queue_offset_diffs[-1]


def from_queue_offsets(
    queue_offsets: Iterable[int],
    *,
    topic: str,
    group: str,
    queue_id: int,
    start_queue_offset: int,
    pop_time_ms: int,
    invisible_ms: int,
    revive_queue_id: int,
    broker_name: str,
) -> Checkpoint:
    """The CK of a pop that read from ``start_queue_offset`` and returned ``queue_offsets``."""
    diffs = tuple(queue_offset - start_queue_offset for queue_offset in queue_offsets)
    return Checkpoint(
        topic=topic,
        group=group,
        queue_id=queue_id,
        start_queue_offset=start_queue_offset,
        pop_time_ms=pop_time_ms,
        invisible_ms=invisible_ms,
        revive_queue_id=revive_queue_id,
        broker_name=broker_name,
        queue_offset_diffs=diffs,
    )


def index_of(ck: Checkpoint, queue_offset: int) -> int | None:
    """Index of the message at ``queue_offset`` in ``ck``, or None when it is not in the batch."""
    diff = queue_offset - ck.start_queue_offset
    if diff < 0:
        return None
    # Diffs are strictly increasing; a linear scan over ≤ 32 ints beats bisect's overhead.
    for index, candidate in enumerate(ck.queue_offset_diffs):
        if candidate == diff:
            return index
        if candidate > diff:
            return None
    return None


def queue_offset_at(ck: Checkpoint, index: int) -> int:
    """Queue offset of message ``index`` (0-based) of ``ck``."""
    if not 0 <= index < ck.count:
        raise errors.InvalidCheckpoint(f"index {index} outside 0..{ck.count - 1}")
    return ck.start_queue_offset + ck.queue_offset_diffs[index]


def queue_offsets(ck: Checkpoint) -> tuple[int, ...]:
    """All queue offsets the checkpoint covers, in order."""
    return tuple(ck.start_queue_offset + diff for diff in ck.queue_offset_diffs)


def is_acked(ck: Checkpoint, index: int) -> bool:
    """True when message ``index`` of ``ck`` is acked."""
    return bool(ck.ack_bitmap >> index & 1)


def with_bitmap(ck: Checkpoint, ack_bitmap: int) -> Checkpoint:
    """Return ``ck`` with the bits of ``ack_bitmap`` OR-ed in (bits are only ever added)."""
    merged = ck.ack_bitmap | ack_bitmap
    if merged == ck.ack_bitmap:
        return ck
    if merged >> len(ck.queue_offset_diffs):
        raise errors.InvalidCheckpoint("ack bitmap has bits beyond the message count")
    # A copy of a checkpoint that was checked when it was made, with more bits: the
    # constructor's checks (a walk of up to 32 diffs) would run once per ack, and cost
    # five times these slot copies. ``Any``: the class is frozen to the type checker only.
    new: Any = object.__new__(Checkpoint)
    new.topic = ck.topic
    new.group = ck.group
    new.queue_id = ck.queue_id
    new.start_queue_offset = ck.start_queue_offset
    new.pop_time_ms = ck.pop_time_ms
    new.invisible_ms = ck.invisible_ms
    new.revive_queue_id = ck.revive_queue_id
    new.broker_name = ck.broker_name
    new.queue_offset_diffs = ck.queue_offset_diffs
    new.ack_bitmap = merged
    new.reput_times = ck.reput_times
    return cast(Checkpoint, new)


def full_bitmap(ck: Checkpoint) -> int:
    """The bitmap with every message of ``ck`` acked."""
    return (1 << ck.count) - 1


def all_acked(ck: Checkpoint) -> bool:
    """True when every message of ``ck`` is acked (it then needs no redelivery)."""
    return ck.ack_bitmap == full_bitmap(ck)


def unacked_offsets(ck: Checkpoint) -> tuple[int, ...]:
    """Queue offsets of the messages of ``ck`` not acked yet, in order."""
    return tuple(
        ck.start_queue_offset + diff
        for index, diff in enumerate(ck.queue_offset_diffs)
        if not ck.ack_bitmap >> index & 1
    )


def bitmap_for(ck: Checkpoint, acked_queue_offsets: Iterable[int]) -> tuple[int, int]:
    """Bitmap of the offsets of ``acked_queue_offsets`` that are in ``ck``, and how many were not.

    Used for batch acks: returns ``(bitmap, unknown_count)``.
    """
    bitmap = 0
    unknown = 0
    for queue_offset in acked_queue_offsets:
        index = index_of(ck, queue_offset)
        if index is None:
            unknown += 1
        else:
            bitmap |= 1 << index
    return bitmap, unknown
