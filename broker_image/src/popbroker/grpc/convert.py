"""Conversions between v2 protobuf messages and the services' plain values.

Rules worth knowing (fact sheet §7-§8):

  * Durations and timestamps from clients are whole seconds (the Python
    client never sets nanos) but are read with nanos anyway.
  * A delivered message always carries ``body_encoding = IDENTITY``, an MD5
    ``body_digest`` in upper-case hex, ``delivery_attempt`` (1 on the first
    delivery), its receipt handle and the user properties as sent.
  * Endpoints are ``IPv4`` for an IPv4 literal, ``IPv6`` for an IPv6 literal
    and ``DOMAIN_NAME`` otherwise.
"""

from __future__ import annotations

import hashlib
import ipaddress
from typing import Any

from popbroker.grpc.protocol import Code, definition
from popbroker.services import messages
from popbroker.services.clients import ClientKind
from popbroker.services.messages import DeliveredMessage, MessageKind, OutgoingMessage
from popbroker.services.pulling import OffsetPolicy, PullRequest
from popbroker.services.receiving import ReceiveRequest
from popbroker.services.routing import Endpoint, RouteQueue
from popbroker.services.settings import PopackSettings
from popbroker.store.api import GroupConfig, Permission, StoredMessage

_KIND_TO_WIRE = {
    MessageKind.NORMAL: definition.NORMAL,
    MessageKind.FIFO: definition.FIFO,
    MessageKind.DELAY: definition.DELAY,
    MessageKind.TRANSACTION: definition.TRANSACTION,
}
_WIRE_TO_KIND = {wire: kind for kind, wire in _KIND_TO_WIRE.items()}

_PERMISSION_TO_WIRE = {
    Permission.NONE: definition.Permission.Value("NONE"),
    Permission.READ: definition.Permission.Value("READ"),
    Permission.WRITE: definition.Permission.Value("WRITE"),
    Permission.READ_WRITE: definition.Permission.Value("READ_WRITE"),
}

_CLIENT_KINDS = {
    definition.PRODUCER: ClientKind.PRODUCER,
    definition.PUSH_CONSUMER: ClientKind.PUSH_CONSUMER,
    definition.SIMPLE_CONSUMER: ClientKind.SIMPLE_CONSUMER,
    definition.PULL_CONSUMER: ClientKind.PULL_CONSUMER,
}

PRODUCER_MAX_ATTEMPTS = 3


def status(code: int, message: str = "") -> Any:
    """A ``Status`` (never code 0)."""
    return definition.Status(code=code or Code.INTERNAL_SERVER_ERROR, message=message)


def ok() -> Any:
    """``Status{OK, "OK"}``."""
    return definition.Status(code=Code.OK, message="OK")


def duration_ms(duration: Any) -> int:
    """Milliseconds of a ``google.protobuf.Duration``."""
    return int(duration.seconds) * 1000 + int(duration.nanos) // 1_000_000


def timestamp_ms(timestamp: Any) -> int:
    """Milliseconds of a ``google.protobuf.Timestamp``."""
    return int(timestamp.seconds) * 1000 + int(timestamp.nanos) // 1_000_000


def set_timestamp_ms(field: Any, ms: int) -> None:
    """Set a ``Timestamp`` field from milliseconds."""
    field.seconds = ms // 1000
    field.nanos = (ms % 1000) * 1_000_000


def set_duration_ms(field: Any, ms: int) -> None:
    """Set a ``Duration`` field from milliseconds."""
    field.seconds = ms // 1000
    field.nanos = (ms % 1000) * 1_000_000


def endpoints(endpoint: Endpoint) -> Any:
    """``Endpoints`` for one ``host:port``."""
    version: int
    try:
        version = ipaddress.ip_address(endpoint.host).version
    except ValueError:
        version = 0
    scheme = {4: definition.IPv4, 6: definition.IPv6}.get(version, definition.DOMAIN_NAME)
    return definition.Endpoints(
        scheme=scheme, addresses=[definition.Address(host=endpoint.host, port=endpoint.port)]
    )


def message_queue(queue: RouteQueue, *, namespace: str) -> Any:
    """A ``MessageQueue`` of a route or an assignment (broker id 0: the master)."""
    return definition.MessageQueue(
        topic=definition.Resource(name=queue.topic, resource_namespace=namespace),
        id=queue.queue_id,
        permission=_PERMISSION_TO_WIRE[queue.perm],
        broker=definition.Broker(name=queue.broker_name, id=0, endpoints=endpoints(queue.endpoint)),
        accept_message_types=sorted(_KIND_TO_WIRE[kind] for kind in queue.accepted),
    )


def client_kind(client_type: int) -> ClientKind:
    """Our name for a wire ``ClientType``."""
    return _CLIENT_KINDS.get(client_type, ClientKind.OTHER)


def message_kind(wire_type: int) -> MessageKind:
    """The kind a v2 ``MessageType`` declares (``UNSUPPORTED`` for kinds popfleet lacks)."""
    return _WIRE_TO_KIND.get(wire_type, MessageKind.UNSUPPORTED)


def outgoing_message(message: Any) -> OutgoingMessage:
    """A producer's ``Message`` as a service value."""
    props = message.system_properties
    delivery_ms = (
        timestamp_ms(props.delivery_timestamp) if props.HasField("delivery_timestamp") else None
    )
    born_ms = timestamp_ms(props.born_timestamp) if props.HasField("born_timestamp") else 0
    return OutgoingMessage(
        topic=message.topic.name,
        body=bytes(message.body),
        message_id=props.message_id,
        kind=message_kind(props.message_type),
        tag=props.tag if props.HasField("tag") else None,
        keys=tuple(props.keys),
        message_group=props.message_group if props.HasField("message_group") else None,
        delivery_timestamp_ms=delivery_ms,
        user_properties=dict(message.user_properties),
        born_timestamp_ms=born_ms,
        born_host=props.born_host,
    )


def outgoing_or_error(message: Any) -> OutgoingMessage | Exception:
    """:func:`outgoing_message`, or why it failed (each message of a send answers alone)."""
    try:
        return outgoing_message(message)
    except Exception as exc:  # noqa: BLE001 - the edge answers every failure
        return exc


def delivered_message(delivered: DeliveredMessage, *, namespace: str, store_host: str) -> Any:
    """A popped message as the client's ``Message``."""
    stored = delivered.stored
    properties = stored.properties
    wire = definition.Message(
        topic=definition.Resource(name=delivered.topic, resource_namespace=namespace),
        user_properties=messages.user_properties(properties),
        body=stored.body,
    )
    system = wire.system_properties
    if stored.tag:
        system.tag = stored.tag
    system.keys.extend(messages.keys(properties))
    system.message_id = messages.message_id(stored)
    system.body_digest.type = definition.MD5
    system.body_digest.checksum = (
        hashlib.md5(stored.body, usedforsecurity=False).hexdigest().upper()
    )
    system.body_encoding = definition.IDENTITY
    system.message_type = _KIND_TO_WIRE[messages.kind_of(properties)]
    set_timestamp_ms(system.born_timestamp, stored.born_timestamp_ms)
    system.born_host = stored.born_host
    set_timestamp_ms(system.store_timestamp, stored.store_timestamp_ms)
    system.store_host = store_host
    delivery_ms = messages.delivery_timestamp_ms(properties)
    if delivery_ms is not None:
        set_timestamp_ms(system.delivery_timestamp, delivery_ms)
    if delivered.receipt_handle:  # pulled messages have none
        system.receipt_handle = delivered.receipt_handle
    system.queue_id = stored.queue_id
    system.queue_offset = stored.queue_offset
    if delivered.invisible_ms > 0:
        set_duration_ms(system.invisible_duration, delivered.invisible_ms)
    system.delivery_attempt = delivered.delivery_attempt
    group = messages.message_group(properties)
    if group is not None:
        system.message_group = group
    return wire


def pulled_message(stored: StoredMessage, *, topic: str, namespace: str, store_host: str) -> Any:
    """A pulled message (no receipt handle, no invisible time) as the client's ``Message``."""
    delivered = DeliveredMessage(
        topic=topic,
        stored=stored,
        receipt_handle="",
        delivery_attempt=stored.reconsume_times + 1,
        invisible_ms=0,
    )
    return delivered_message(delivered, namespace=namespace, store_host=store_host)


def pull_request(request: Any, *, deadline_remaining_ms: int | None) -> PullRequest:
    """A ``PullMessageRequest`` as a service value."""
    expression = request.filter_expression
    return PullRequest(
        group=request.group.name,
        topic=request.message_queue.topic.name,
        queue_id=request.message_queue.id,
        queue_offset=request.offset,
        batch_size=request.batch_size,
        filter_expression=expression.expression or "*",
        sql_filter=expression.type == definition.SQL,
        poll_ms=(
            duration_ms(request.long_polling_timeout)
            if request.HasField("long_polling_timeout")
            else None
        ),
        deadline_remaining_ms=deadline_remaining_ms,
    )


def offset_policy(policy: int) -> OffsetPolicy:
    """Our name for a wire ``QueryOffsetPolicy``."""
    name = definition.QueryOffsetPolicy.Name(policy)
    return OffsetPolicy(name)


def receive_request(
    request: Any, *, deadline_remaining_ms: int | None, honour_queue_id: bool
) -> ReceiveRequest:
    """A ``ReceiveMessageRequest`` as a service value."""
    expression = request.filter_expression
    return ReceiveRequest(
        group=request.group.name,
        topic=request.message_queue.topic.name,
        batch_size=request.batch_size,
        invisible_ms=(
            duration_ms(request.invisible_duration)
            if request.HasField("invisible_duration")
            else None
        ),
        queue_id=request.message_queue.id,
        honour_queue_id=honour_queue_id,
        filter_expression=expression.expression or "*",
        sql_filter=expression.type == definition.SQL,
        poll_ms=(
            duration_ms(request.long_polling_timeout)
            if request.HasField("long_polling_timeout")
            else None
        ),
        deadline_remaining_ms=deadline_remaining_ms,
        attempt_id=request.attempt_id if request.HasField("attempt_id") else None,
    )


def settings_reply(client: Any, *, group: GroupConfig | None, settings: PopackSettings) -> Any:
    """The settings answered to a client's settings command (fact sheet §8.2)."""
    reply = definition.Settings()
    if client.HasField("client_type"):
        reply.client_type = client.client_type
    if client.HasField("access_point"):
        reply.access_point.CopyFrom(client.access_point)
    if client.HasField("request_timeout"):
        reply.request_timeout.CopyFrom(client.request_timeout)
    reply.metric.on = False
    if client.WhichOneof("pub_sub") == "subscription":
        _subscription_reply(reply, client, group=group, settings=settings)
    else:
        publishing = reply.publishing
        publishing.topics.extend(client.publishing.topics)
        publishing.max_body_size = settings.max_body_bytes
        publishing.validate_message_type = True
        backoff = reply.backoff_policy
        backoff.max_attempts = PRODUCER_MAX_ATTEMPTS
        set_duration_ms(backoff.exponential_backoff.initial, 10)
        set_duration_ms(backoff.exponential_backoff.max, 1_000)
        backoff.exponential_backoff.multiplier = 2.0
    return reply


def _subscription_reply(
    reply: Any, client: Any, *, group: GroupConfig | None, settings: PopackSettings
) -> None:
    subscription = reply.subscription
    subscription.CopyFrom(client.subscription)
    subscription.fifo = bool(group and group.fifo)
    subscription.receive_batch_size = settings.receive_batch_size
    poll_ms = settings.max_long_polling_ms
    if client.subscription.HasField("long_polling_timeout"):
        poll_ms = min(poll_ms, duration_ms(client.subscription.long_polling_timeout))
    set_duration_ms(subscription.long_polling_timeout, poll_ms)
    max_reconsume = group.max_reconsume_times if group is not None else 16
    backoff = reply.backoff_policy
    backoff.max_attempts = max_reconsume + 1
    policy = group.retry_policy if group is not None else None
    if policy is not None and policy.kind == "customized" and policy.customized_backoff_ms:
        for step_ms in policy.customized_backoff_ms:
            set_duration_ms(backoff.customized_backoff.next.add(), step_ms)
    else:
        initial_ms = policy.initial_backoff_ms if policy is not None else 1_000
        max_ms = policy.max_backoff_ms if policy is not None else 60_000
        multiplier = policy.multiplier if policy is not None else 2.0
        set_duration_ms(backoff.exponential_backoff.initial, initial_ms)
        set_duration_ms(backoff.exponential_backoff.max, max_ms)
        backoff.exponential_backoff.multiplier = multiplier
