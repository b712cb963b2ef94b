"""Errors the services raise on top of the POP core's and the store's.

The gRPC edge maps three hierarchies with one table
(``popbroker.grpc.statuses``): :class:`popbroker.pop.errors.PopError`,
:class:`popbroker.store.errors.StoreError` and :class:`ServiceError` here.
Each carries ``retriable``: True means the same request may succeed later.
"""

from __future__ import annotations

from typing import ClassVar


class ServiceError(Exception):
    """Base of the services' own errors."""

    retriable: ClassVar[bool] = False

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class TopicNotFound(ServiceError):
    """The topic does not exist on this broker (or is a system topic)."""


class GroupNotFound(ServiceError):
    """The consumer group does not exist on this broker."""


class TopicNotWritable(ServiceError):
    """The topic's permission forbids sends."""


class TopicNotReadable(ServiceError):
    """The topic's permission forbids receives."""


class ConsumeDisabled(ServiceError):
    """The group's ``consume_enable`` is off."""


class IllegalFilterExpression(ServiceError):
    """A tag filter that does not parse (or an SQL92 filter, which we do not support)."""


class IllegalMessage(ServiceError):
    """A message field is malformed (tag, keys, message group, message id)."""

    def __init__(self, reason: str, *, field: str) -> None:
        super().__init__(reason)
        self.field = field  # "tag", "keys", "message_group", "message_id", "property_key"


class MessageTypeConflict(ServiceError):
    """The message's type (NORMAL/FIFO/DELAY/...) is not accepted by the topic."""


class IllegalDeliveryTime(ServiceError):
    """A DELAY message's delivery time is too far in the future."""


class PropertiesTooLarge(ServiceError):
    """User properties exceed the count or byte limit."""


class MessageCorrupted(ServiceError):
    """A request carries no message, or messages for several topics."""


class OffsetNotFound(ServiceError):
    """The group has no committed offset on the queue."""


class IllegalOffset(ServiceError):
    """A queue offset outside what the queue can hold (negative, beyond max)."""


class TooManyRequests(ServiceError):
    """Too many parked receives (long polling is full); try again later."""

    retriable: ClassVar[bool] = True


class Unsupported(ServiceError):
    """A feature this broker does not implement (transactions, SQL92 filters)."""


class ClientIdRequired(ServiceError):
    """A request without the ``x-mq-client-id`` header."""


class UnrecognizedClient(ServiceError):
    """A heartbeat from a client whose settings were never received."""
