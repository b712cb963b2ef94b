"""The one error hierarchy of the pure POP core.

Purpose: every failure the POP core can report is a :class:`PopError`. Each
subclass carries a ``retriable`` class attribute so the edge (the services
layer, later the gRPC endpoint) can map it with one table: a retriable error
means "the same request may succeed later" (e.g. a buffer that is full right
now); a non-retriable one means "this input is wrong" (a forged receipt
handle, a batch of 33).

Invariants:
  * The core raises nothing but ``PopError`` subclasses for bad *input*
    (untrusted handles, revive-log bodies, request parameters). A plain
    ``KeyError``/``TypeError``/``ValueError`` escaping the core is a bug.
  * Errors carry a human-readable ``reason``; the edge may show it to clients.

Callers: every module of ``popbroker.pop`` raises these; the services layer
translates them to RocketMQ status codes (e.g. ``InvalidReceiptHandle`` →
``INVALID_RECEIPT_HANDLE``, ``IllegalInvisibleTime`` →
``ILLEGAL_INVISIBLE_TIME``, ``IllegalBatchSize`` → ``ILLEGAL_MESSAGE_BATCH_SIZE``
or ``BAD_REQUEST``, ``QueueOffsetOutOfRange`` → ``NO_MESSAGE`` /
``MESSAGE_NOT_FOUND``).
"""

from __future__ import annotations

from typing import ClassVar


class PopError(Exception):
    """Base class of every error raised by the POP core."""

    retriable: ClassVar[bool] = False

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class InvalidReceiptHandle(PopError):
    """A receipt handle is malformed, forged, out of range or for another broker."""


class IllegalInvisibleTime(PopError):
    """An invisible time is outside the configured bounds."""


class IllegalBatchSize(PopError):
    """A pop asked for fewer than one or more than 32 messages."""


class IllegalQueueId(PopError):
    """A requested queue id is neither -1 (all queues) nor a readable queue."""


class QueueOffsetOutOfRange(PopError):
    """A queue offset names no existing message (e.g. change-invisible at max, upstream #9187)."""


class InvalidCheckpoint(PopError):
    """A checkpoint value violates its invariants (count, diffs, bitmap)."""


class MalformedRecord(PopError):
    """A revive-log record body (``ck``, ``ack``, ``bAck``) cannot be decoded strictly."""


class IllegalRetryTopic(PopError):
    """A topic name is not a v2 POP retry topic (``%RETRY%<group>+<topic>``)."""


class IllegalReconsumeTimes(PopError):
    """A reconsume count or maximum is negative."""


class PopOrderViolation(PopError):
    """A caller broke an ordering contract of a state object.

    Examples: a checkpoint added behind the queue's pop cursor (it would hand
    out an in-flight offset twice), or revive records observed out of
    revive-queue order. These indicate a bug in the caller, not bad client
    input, and are not retriable.
    """


class CapacityExceeded(PopError):
    """A bounded in-memory structure is full; retry later."""

    retriable: ClassVar[bool] = True
