"""Refusals of the admin API and the one table from store errors to gRPC statuses.

Every refused call ends with ``(status code, reason, message)``: the code from
the table below, a stable ``reason`` in the trailing metadata key
``popfleet-admin-reason`` (conditions and scripts match on it, never on the
text), and a message that names what was wrong.

A request is validated before anything is changed, so a refusal always means
"nothing changed". Store errors that slip through (the store validates again,
atomically) map by their class:

=======================  ====================  ===================
store error              status                reason
=======================  ====================  ===================
InvalidName              INVALID_ARGUMENT      BAD_NAME
QueueShrinkRefused       FAILED_PRECONDITION   QUEUE_SHRINK
InvalidArgument          INVALID_ARGUMENT      INVALID_ARGUMENT
UnknownTopic             NOT_FOUND             UNKNOWN_TOPIC
UnknownGroup             NOT_FOUND             UNKNOWN_GROUP
StoreFull                RESOURCE_EXHAUSTED    STORE_FULL
StoreClosed              UNAVAILABLE           STORE_CLOSED
NotLeader                UNAVAILABLE           NOT_LEADER
NotEnoughReplicas        UNAVAILABLE           NOT_ENOUGH_REPLICAS
CorruptStore             DATA_LOSS             CORRUPT_STORE
any other StoreError     INTERNAL (retriable:  STORE_ERROR
                         UNAVAILABLE)
=======================  ====================  ===================
"""

from __future__ import annotations

import grpc

from popbroker.store import errors as store_errors

REASON_METADATA_KEY = "popfleet-admin-reason"


class AdminRefusal(Exception):
    """A request the admin API answers with a non-OK status (nothing was changed)."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL
    retriable = False

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason


class InvalidArgument(AdminRefusal):
    code = grpc.StatusCode.INVALID_ARGUMENT

    def __init__(self, message: str, *, reason: str = "INVALID_ARGUMENT") -> None:
        super().__init__(message, reason=reason)


class NotFound(AdminRefusal):
    code = grpc.StatusCode.NOT_FOUND


class FailedPrecondition(AdminRefusal):
    code = grpc.StatusCode.FAILED_PRECONDITION


class OutOfRange(AdminRefusal):
    code = grpc.StatusCode.OUT_OF_RANGE


class Unauthenticated(AdminRefusal):
    code = grpc.StatusCode.UNAUTHENTICATED


class Unavailable(AdminRefusal):
    code = grpc.StatusCode.UNAVAILABLE
    retriable = True


_BY_STORE_ERROR: dict[type[store_errors.StoreError], tuple[grpc.StatusCode, str]] = {
    store_errors.InvalidName: (grpc.StatusCode.INVALID_ARGUMENT, "BAD_NAME"),
    store_errors.QueueShrinkRefused: (grpc.StatusCode.FAILED_PRECONDITION, "QUEUE_SHRINK"),
    store_errors.InvalidArgument: (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT"),
    store_errors.UnknownTopic: (grpc.StatusCode.NOT_FOUND, "UNKNOWN_TOPIC"),
    store_errors.UnknownGroup: (grpc.StatusCode.NOT_FOUND, "UNKNOWN_GROUP"),
    store_errors.StoreFull: (grpc.StatusCode.RESOURCE_EXHAUSTED, "STORE_FULL"),
    store_errors.StoreClosed: (grpc.StatusCode.UNAVAILABLE, "STORE_CLOSED"),
    store_errors.NotLeader: (grpc.StatusCode.UNAVAILABLE, "NOT_LEADER"),
    store_errors.NotEnoughReplicas: (grpc.StatusCode.UNAVAILABLE, "NOT_ENOUGH_REPLICAS"),
    store_errors.CorruptStore: (grpc.StatusCode.DATA_LOSS, "CORRUPT_STORE"),
}


def status_of_store_error(exc: store_errors.StoreError) -> tuple[grpc.StatusCode, str]:
    """The status code and reason of a store error (looked up along its MRO)."""
    for cls in type(exc).__mro__:
        found = _BY_STORE_ERROR.get(cls)
        if found is not None:
            return found
    if exc.retriable:
        return grpc.StatusCode.UNAVAILABLE, "STORE_ERROR"
    return grpc.StatusCode.INTERNAL, "STORE_ERROR"
