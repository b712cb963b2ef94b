"""The store's error hierarchy.

Every error a caller can see derives from ``StoreError``. ``retriable`` tells an
edge (the wire server, the gRPC endpoint) whether the same request may succeed
later (disk full, store stopping) or never will (bad name, oversized body).
Edges translate these in one table each; nothing below them catches broadly.
"""

from __future__ import annotations


class StoreError(Exception):
    """Base of every store error."""

    retriable: bool = False


class InvalidArgument(StoreError):
    """A request that can never succeed as written."""


class InvalidName(InvalidArgument):
    """A topic or group name outside ``^[%a-zA-Z0-9_-]{1,127}$`` (or a reserved one)."""


class MessageTooLarge(InvalidArgument):
    """A body or property block over the configured limit; nothing was written."""


class EmptyBody(InvalidArgument):
    """A message without a body; nothing was written."""


class UnknownTopic(StoreError):
    """The topic (or queue id) does not exist on this broker."""


class UnknownGroup(StoreError):
    """The consumer group does not exist on this broker."""


class QueueShrinkRefused(InvalidArgument):
    """A topic update would remove queues; queues only grow."""


class StoreFull(StoreError):
    """The disk refused a write (ENOSPC, EDQUOT, EFBIG). Reads still work."""

    retriable = True


class StoreClosed(StoreError):
    """The store is shutting down or closed."""

    retriable = True


class NotLeader(StoreError):
    """A write to a replica that does not lead its broker set now (issue 18): write to the
    leader the Lease names, or again once this replica leads."""

    retriable = True


class NotEnoughReplicas(StoreError):
    """A SYNC write refused before its append: the in-sync set is below its minimum."""

    retriable = True


class ReplicationTimeout(NotEnoughReplicas):
    """A SYNC write not acknowledged by the in-sync set in time: it is on the leader and
    may be lost with it (RocketMQ's FLUSH_SLAVE_TIMEOUT)."""


class CorruptStore(StoreError):
    """Durable data failed verification; the store refuses to guess."""
