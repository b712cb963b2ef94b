"""The one error hierarchy of ``popfleet_api`` (aiokafka-style, STYLE §8).

Every failed admin call raises an :class:`AdminError` subclass chosen by the
gRPC status the broker answered (or the transport failed with):

=====================  =========================  =========
status                 class                      retriable
=====================  =========================  =========
INVALID_ARGUMENT       :class:`InvalidArgument`   no
NOT_FOUND              :class:`NotFound`          no
FAILED_PRECONDITION    :class:`FailedPrecondition` no
OUT_OF_RANGE           :class:`OutOfRange`        no
UNAUTHENTICATED        :class:`Unauthenticated`   no
PERMISSION_DENIED      :class:`PermissionDenied`  no
UNIMPLEMENTED          :class:`Unimplemented`     no
UNAVAILABLE            :class:`Unavailable`       yes
DEADLINE_EXCEEDED      :class:`DeadlineExceeded`  yes
RESOURCE_EXHAUSTED     :class:`ResourceExhausted` yes
DATA_LOSS              :class:`DataLoss`          no
anything else          :class:`AdminError`        no
=====================  =========================  =========

``reason`` is the broker's stable reason (trailing metadata
``popfleet-admin-reason``, e.g. ``QUEUE_SHRINK``), "" when it gave none;
``target`` the broker that answered. The operator maps ``retriable`` errors to
``kopf.TemporaryError`` and the others to a condition saying what is wrong.

Pure: no grpc import; status codes travel as their names.
"""

from __future__ import annotations

REASON_METADATA_KEY = "popfleet-admin-reason"


class AdminError(Exception):
    """Base of every admin API error."""

    retriable: bool = False
    code: str = "UNKNOWN"

    def __init__(self, message: str, *, reason: str = "", target: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.target = target

    def __str__(self) -> str:
        where = f"{self.target}: " if self.target else ""
        return f"{where}{self.code}: {self.message}"


class InvalidArgument(AdminError):
    """The request can never succeed as written (bad name, negative count, no mode)."""

    code = "INVALID_ARGUMENT"


class NotFound(AdminError):
    """An unknown topic, group or revive queue."""

    code = "NOT_FOUND"


class FailedPrecondition(AdminError):
    """Valid input that the broker's current state refuses (e.g. shrinking queues)."""

    code = "FAILED_PRECONDITION"


class OutOfRange(AdminError):
    """A scan position beyond the end of the log."""

    code = "OUT_OF_RANGE"


class Unauthenticated(AdminError):
    """The broker wants a token and the call carried none or a wrong one."""

    code = "UNAUTHENTICATED"


class PermissionDenied(AdminError):
    code = "PERMISSION_DENIED"


class Unimplemented(AdminError):
    """The broker does not know this RPC (an older broker)."""

    code = "UNIMPLEMENTED"


class Unavailable(AdminError):
    """The broker cannot be reached or is stopping."""

    retriable = True
    code = "UNAVAILABLE"


class DeadlineExceeded(AdminError):
    """No answer within the call's deadline; a write may or may not have happened."""

    retriable = True
    code = "DEADLINE_EXCEEDED"


class ResourceExhausted(AdminError):
    """The broker's disk is full or it is overloaded."""

    retriable = True
    code = "RESOURCE_EXHAUSTED"


class DataLoss(AdminError):
    code = "DATA_LOSS"


_BY_CODE: dict[str, type[AdminError]] = {
    cls.code: cls
    for cls in (
        InvalidArgument,
        NotFound,
        FailedPrecondition,
        OutOfRange,
        Unauthenticated,
        PermissionDenied,
        Unimplemented,
        Unavailable,
        DeadlineExceeded,
        ResourceExhausted,
        DataLoss,
    )
}


def from_status(code_name: str, message: str, *, reason: str = "", target: str = "") -> AdminError:
    """The error for a failed call that ended with status ``code_name`` (e.g. ``"NOT_FOUND"``)."""
    cls = _BY_CODE.get(code_name)
    if cls is None:
        error = AdminError(message, reason=reason, target=target)
        error.code = code_name
        return error
    return cls(message, reason=reason, target=target)
