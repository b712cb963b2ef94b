"""The one table between store errors and gRPC status codes.

The server ends a failed call with ``status_for(exc)``: the status code from
``STATUS_BY_ERROR`` (looked up along the exception's MRO, so a new subclass of
``InvalidArgument`` is still INVALID_ARGUMENT) and the exception's class name in
the trailing metadata key ``ERROR_METADATA_KEY``. The client turns the status
back into an exception with ``error_from_status``:

1. the metadata names a ``StoreError`` subclass: raise that type with the
   server's message (the same type and text the in-process store raises);
2. no metadata (the store never answered: socket gone, restart, deadline):
   a transport failure, ``StoreClosed`` (retriable) for UNAVAILABLE and
   DEADLINE_EXCEEDED -- for an ``append`` the outcome is then unknown, as with
   any RPC -- and the base ``StoreError`` (not retriable) for anything else;
3. a name this client does not know (a newer server): the class that the
   status code stands for in ``ERROR_BY_STATUS``.

Pure: no grpc I/O here, only ``grpc.StatusCode`` values.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import grpc

from popbroker.store import errors

ERROR_METADATA_KEY = "popbroker-store-error"

# Most specific first only for readability: lookup walks the MRO of the raised type.
STATUS_BY_ERROR: dict[type[errors.StoreError], grpc.StatusCode] = {
    errors.InvalidName: grpc.StatusCode.INVALID_ARGUMENT,
    errors.MessageTooLarge: grpc.StatusCode.INVALID_ARGUMENT,
    errors.EmptyBody: grpc.StatusCode.INVALID_ARGUMENT,
    errors.QueueShrinkRefused: grpc.StatusCode.FAILED_PRECONDITION,
    errors.InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    errors.UnknownTopic: grpc.StatusCode.NOT_FOUND,
    errors.UnknownGroup: grpc.StatusCode.NOT_FOUND,
    errors.StoreFull: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.StoreClosed: grpc.StatusCode.UNAVAILABLE,
    errors.NotLeader: grpc.StatusCode.FAILED_PRECONDITION,
    errors.NotEnoughReplicas: grpc.StatusCode.UNAVAILABLE,
    errors.CorruptStore: grpc.StatusCode.DATA_LOSS,
    # A subclass not listed above and not below a listed class: by its flag.
    errors.StoreError: grpc.StatusCode.INTERNAL,
}

# Rule 3 of the module docstring: the reading of a bare status code.
ERROR_BY_STATUS: dict[grpc.StatusCode, type[errors.StoreError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: errors.InvalidArgument,
    grpc.StatusCode.FAILED_PRECONDITION: errors.InvalidArgument,
    grpc.StatusCode.RESOURCE_EXHAUSTED: errors.StoreFull,
    grpc.StatusCode.UNAVAILABLE: errors.StoreClosed,
    grpc.StatusCode.DATA_LOSS: errors.CorruptStore,
}

_TRANSPORT_RETRIABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


def _subclasses(cls: type[errors.StoreError]) -> Iterator[type[errors.StoreError]]:
    yield cls
    for sub in cls.__subclasses__():
        yield from _subclasses(sub)


@functools.cache
def _known_errors() -> dict[str, type[errors.StoreError]]:
    """Every ``StoreError`` subclass defined in ``popbroker.store.errors``, by name."""
    return {
        cls.__name__: cls
        for cls in _subclasses(errors.StoreError)
        if cls.__module__ == errors.__name__
    }


def status_for(exc: errors.StoreError) -> tuple[grpc.StatusCode, str]:
    """The status code and the error name (for the metadata) of a raised store error."""
    for cls in type(exc).__mro__:
        code = STATUS_BY_ERROR.get(cls)
        if code is None:
            continue
        if cls is errors.StoreError and exc.retriable:
            code = grpc.StatusCode.UNAVAILABLE
        name = type(exc).__name__ if type(exc).__name__ in _known_errors() else cls.__name__
        return code, name
    raise AssertionError("unreachable: StoreError is in the table")  # pragma: no cover


def error_from_status(
    code: grpc.StatusCode, message: str, error_name: str | None
) -> errors.StoreError:
    """The exception a client raises for a failed call; see the module docstring."""
    if error_name is None:
        if code in _TRANSPORT_RETRIABLE:
            return errors.StoreClosed(f"store unreachable ({code.name}): {message}")
        return errors.StoreError(f"store call failed ({code.name}): {message}")
    cls = _known_errors().get(error_name) or ERROR_BY_STATUS.get(code, errors.StoreError)
    try:
        return cls(message)
    except TypeError:  # a subclass with a richer constructor: keep the text, lose the type
        return ERROR_BY_STATUS.get(code, errors.StoreError)(message)
