"""The one table mapping domain errors to v2 ``Code`` values.

Every failure is answered in the response's ``status`` (gRPC status OK), as the
proxy does (fact sheet §6): the official clients turn these codes into their
exception types, while a gRPC-level error would surface as a raw
``AioRpcError``. Code 0 is never sent (the client calls it "illegal").

Lookup walks the error's MRO, so a subclass without its own row inherits its
parent's code; anything unknown is ``INTERNAL_SERVER_ERROR`` (the servicer
logs it). ``IllegalMessage`` is refined by the offending field.
"""

from __future__ import annotations

from popbroker.auth import errors as auth_errors
from popbroker.grpc.protocol import Code
from popbroker.pop import errors as pop_errors
from popbroker.services import errors as service_errors
from popbroker.store import errors as store_errors

TABLE: dict[type[BaseException], int] = {
    # auth (popbroker.grpc.authguard)
    auth_errors.Unauthenticated: Code.UNAUTHORIZED,
    auth_errors.Forbidden: Code.FORBIDDEN,
    # POP core
    pop_errors.InvalidReceiptHandle: Code.INVALID_RECEIPT_HANDLE,
    pop_errors.QueueOffsetOutOfRange: Code.INVALID_RECEIPT_HANDLE,
    pop_errors.IllegalInvisibleTime: Code.ILLEGAL_INVISIBLE_TIME,
    pop_errors.IllegalBatchSize: Code.BAD_REQUEST,
    pop_errors.IllegalQueueId: Code.BAD_REQUEST,
    pop_errors.IllegalRetryTopic: Code.BAD_REQUEST,
    pop_errors.IllegalReconsumeTimes: Code.BAD_REQUEST,
    pop_errors.CapacityExceeded: Code.TOO_MANY_REQUESTS,
    pop_errors.PopError: Code.INTERNAL_SERVER_ERROR,
    # store
    store_errors.UnknownTopic: Code.TOPIC_NOT_FOUND,
    store_errors.UnknownGroup: Code.CONSUMER_GROUP_NOT_FOUND,
    store_errors.EmptyBody: Code.MESSAGE_BODY_EMPTY,
    store_errors.MessageTooLarge: Code.MESSAGE_BODY_TOO_LARGE,
    store_errors.InvalidName: Code.ILLEGAL_TOPIC,
    store_errors.InvalidArgument: Code.BAD_REQUEST,
    # replication (docs/design/2026-11-28-replication.md, "What clients see"): no v2 code
    # makes an official client query the route at once; these are ones they retry
    store_errors.NotLeader: Code.HA_NOT_AVAILABLE,
    store_errors.ReplicationTimeout: Code.SLAVE_PERSISTENCE_TIMEOUT,
    store_errors.NotEnoughReplicas: Code.HA_NOT_AVAILABLE,
    store_errors.StoreFull: Code.INTERNAL_SERVER_ERROR,
    store_errors.StoreClosed: Code.INTERNAL_SERVER_ERROR,
    store_errors.CorruptStore: Code.INTERNAL_ERROR,
    store_errors.StoreError: Code.INTERNAL_SERVER_ERROR,
    # services
    service_errors.TopicNotFound: Code.TOPIC_NOT_FOUND,
    service_errors.GroupNotFound: Code.CONSUMER_GROUP_NOT_FOUND,
    service_errors.TopicNotWritable: Code.FORBIDDEN,
    service_errors.TopicNotReadable: Code.FORBIDDEN,
    service_errors.ConsumeDisabled: Code.FORBIDDEN,
    service_errors.IllegalFilterExpression: Code.ILLEGAL_FILTER_EXPRESSION,
    service_errors.IllegalMessage: Code.BAD_REQUEST,
    service_errors.MessageTypeConflict: Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    service_errors.IllegalDeliveryTime: Code.ILLEGAL_DELIVERY_TIME,
    service_errors.PropertiesTooLarge: Code.MESSAGE_PROPERTIES_TOO_LARGE,
    service_errors.MessageCorrupted: Code.MESSAGE_CORRUPTED,
    service_errors.OffsetNotFound: Code.OFFSET_NOT_FOUND,
    service_errors.IllegalOffset: Code.ILLEGAL_OFFSET,
    service_errors.TooManyRequests: Code.TOO_MANY_REQUESTS,
    service_errors.Unsupported: Code.UNSUPPORTED,
    service_errors.ClientIdRequired: Code.CLIENT_ID_REQUIRED,
    service_errors.UnrecognizedClient: Code.UNRECOGNIZED_CLIENT_TYPE,
}

ILLEGAL_MESSAGE_FIELDS: dict[str, int] = {
    "tag": Code.ILLEGAL_MESSAGE_TAG,
    "keys": Code.ILLEGAL_MESSAGE_KEY,
    "message_group": Code.ILLEGAL_MESSAGE_GROUP,
    "message_id": Code.ILLEGAL_MESSAGE_ID,
    "property_key": Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
}

DOMAIN_ERRORS = (
    auth_errors.AuthError,
    pop_errors.PopError,
    store_errors.StoreError,
    service_errors.ServiceError,
)


def code_of(exc: BaseException) -> int:
    """The v2 ``Code`` for ``exc`` (``INTERNAL_SERVER_ERROR`` when unknown)."""
    if isinstance(exc, service_errors.IllegalMessage):
        return int(ILLEGAL_MESSAGE_FIELDS.get(exc.field, Code.BAD_REQUEST))
    for cls in type(exc).__mro__:
        code = TABLE.get(cls)
        if code is not None:
            return int(code)
    return int(Code.INTERNAL_SERVER_ERROR)


def reason_of(exc: BaseException) -> str:
    """The human-readable message sent with the code."""
    reason = getattr(exc, "reason", None)
    return str(reason) if reason else (str(exc) or type(exc).__name__)
