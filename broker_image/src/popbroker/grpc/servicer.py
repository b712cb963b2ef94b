"""``apache.rocketmq.v2.MessagingService`` over the popack services.

Conventions for every RPC (fact sheet §0, §6):

  * Failures go in the response's ``status`` with gRPC status OK; the code
    comes from :mod:`popbroker.grpc.statuses`. An unexpected exception is
    logged and answered ``INTERNAL_SERVER_ERROR``: bad input never crashes the
    role. Cancellation is not caught. One helper, ``_answered``, applies this
    rule to every call into the services.
  * Clients are keyed by the ``x-mq-client-id`` header.
  * ``resource_namespace`` is echoed back and otherwise ignored.

Per RPC:

  * QueryRoute — every member's queues, broker id 0, accepted message types.
  * Telemetry — each ``settings`` command is answered with ``status OK`` and
    the merged settings (``publishing.max_body_size``, back-off, receive batch
    size, long-polling timeout); the stream stays open until the client
    closes it (5.1.1 clients wait for this answer in ``startup()``).
  * Heartbeat / NotifyClientTermination — track live clients.
  * SendMessage — one entry per message; top status is the common code or
    ``MULTIPLE_RESULTS``; a batch's new messages are stored with one append.
  * ReceiveMessage — ``status`` → messages → ``delivery_timestamp``, then the
    stream ends; an empty poll answers ``MESSAGE_NOT_FOUND``. The poll budget
    ends before the call's deadline (see :mod:`popbroker.services.receiving`).
  * AckMessage — per-entry results; ChangeInvisibleDuration — the new handle
    (the old one on failure, since the client stores whatever comes back);
    ForwardMessageToDeadLetterQueue; QueryAssignment.
  * PullMessage (``status`` → messages → ``next_offset``), GetOffset,
    UpdateOffset, QueryOffset — offset-based pulling for lite pull consumers
    (:mod:`popbroker.services.pulling`).
"""

# ruff: noqa: N802 -- servicer methods carry the gRPC method names (QueryRoute, ...)
from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from popbroker.grpc import convert, front, frontappends, statuses
from popbroker.grpc.protocol import Code, MessagingServiceServicer, definition, service
from popbroker.services import errors
from popbroker.services.clients import ClientKind
from popbroker.services.popack import PopackServices
from popbroker.services.routing import Endpoint

log = logging.getLogger(__name__)

CLIENT_ID_HEADER = "x-mq-client-id"

_T = TypeVar("_T")


def _client_id(context: Any) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == CLIENT_ID_HEADER:
            return str(value) or None
    return None


def _failure(exc: Exception, rpc: str) -> Any:
    if not isinstance(exc, statuses.DOMAIN_ERRORS):
        log.exception("%s failed unexpectedly", rpc, exc_info=exc)
        return convert.status(Code.INTERNAL_SERVER_ERROR, f"internal error: {type(exc).__name__}")
    return convert.status(statuses.code_of(exc), statuses.reason_of(exc))


@dataclass(frozen=True, slots=True)
class _Failed:
    """A call that failed, as the v2 status the RPC answers with."""

    status: Any


async def _answered(rpc: str, call: Callable[[], Awaitable[_T]]) -> _T | _Failed:
    """Run ``call``; every failure becomes its v2 status (the edge rule: domain errors by
    the table in :mod:`popbroker.grpc.statuses`, anything else logged and INTERNAL)."""
    try:
        return await call()
    except Exception as exc:  # noqa: BLE001 - the edge answers every failure
        return _Failed(_failure(exc, rpc))


def _left_before_the_answer(delivered: object) -> None:
    """The call ended (client cancelled, deadline passed) before ReceiveMessage answered.

    Nothing is written to a finished call: gRPC would refuse the write and log it as an
    error of the servicer. Popped messages are not lost: their checkpoint is in the revive
    log or the buffer, so they come back after their invisible time (at least once).
    """
    if isinstance(delivered, tuple) and delivered:
        log.warning(
            "ReceiveMessage: the call ended before the answer; %d popped message(s) come back "
            "after their invisible time",
            len(delivered),
        )


def _common_status(entry_statuses: list[Any]) -> Any:
    codes = {s.code for s in entry_statuses}
    if not entry_statuses:
        return convert.ok()
    if len(codes) == 1:
        return entry_statuses[0]
    return convert.status(Code.MULTIPLE_RESULTS, "multiple results")


class MessagingServicer(MessagingServiceServicer):  # type: ignore[misc]
    """The RPCs (see the module docstring)."""

    def __init__(self, services: PopackServices, *, advertised: Endpoint) -> None:
        self._services = services
        self._store_host = str(advertised)

    # -- routes and clients ------------------------------------------------------------------

    async def QueryRoute(self, request: Any, context: Any) -> Any:
        route = await _answered(
            "QueryRoute", lambda: self._services.router.route(request.topic.name)
        )
        if isinstance(route, _Failed):
            return service.QueryRouteResponse(status=route.status)
        namespace = request.topic.resource_namespace
        return service.QueryRouteResponse(
            status=convert.ok(),
            message_queues=[convert.message_queue(q, namespace=namespace) for q in route],
        )

    async def QueryAssignment(self, request: Any, context: Any) -> Any:
        async def assignment() -> Any:
            client_id = _client_id(context)
            if client_id is None:
                raise errors.ClientIdRequired("x-mq-client-id header is required")
            return await self._services.router.assignment(
                topic_name=request.topic.name,
                group=request.group.name,
                client_id=client_id,
                clients=self._services.clients,
            )

        assigned = await _answered("QueryAssignment", assignment)
        if isinstance(assigned, _Failed):
            return service.QueryAssignmentResponse(status=assigned.status)
        namespace = request.topic.resource_namespace
        return service.QueryAssignmentResponse(
            status=convert.ok(),
            assignments=[
                definition.Assignment(message_queue=convert.message_queue(q, namespace=namespace))
                for q in assigned
            ],
        )

    async def Telemetry(self, request_iterator: Any, context: Any) -> AsyncIterator[Any]:
        client_id = _client_id(context)
        async for command in request_iterator:
            if not command.HasField("settings"):
                continue  # replies to server commands (stack traces, verifications): nothing to do
            yield await self._settings_reply(client_id, command.settings)

    async def _settings_reply(self, client_id: str | None, settings: Any) -> Any:
        services = self._services

        async def reply() -> Any:
            group_name: str | None = None
            topics: tuple[str, ...]
            if settings.WhichOneof("pub_sub") == "subscription":
                group_name = settings.subscription.group.name or None
                topics = tuple(e.topic.name for e in settings.subscription.subscriptions)
            else:
                topics = tuple(t.name for t in settings.publishing.topics)
            if client_id is not None:
                services.clients.on_settings(
                    client_id,
                    kind=convert.client_kind(settings.client_type),
                    group=group_name,
                    topics=topics,
                )
            group = None
            if group_name is not None:
                group = await services.config.group_or_none(group_name)
            return convert.settings_reply(settings, group=group, settings=services.settings)

        answer = await _answered("Telemetry", reply)
        if isinstance(answer, _Failed):
            return service.TelemetryCommand(status=answer.status)
        return service.TelemetryCommand(status=convert.ok(), settings=answer)

    async def Heartbeat(self, request: Any, context: Any) -> Any:
        client_id = _client_id(context)
        if client_id is None:
            return service.HeartbeatResponse(
                status=convert.status(Code.CLIENT_ID_REQUIRED, "x-mq-client-id is required")
            )
        group = request.group.name if request.HasField("group") else None
        self._services.clients.on_heartbeat(
            client_id, kind=convert.client_kind(request.client_type), group=group or None
        )
        return service.HeartbeatResponse(status=convert.ok())

    async def NotifyClientTermination(self, request: Any, context: Any) -> Any:
        client_id = _client_id(context)
        if client_id is not None:
            self._services.clients.on_termination(client_id)
        return service.NotifyClientTerminationResponse(status=convert.ok())

    # -- producing ---------------------------------------------------------------------------

    async def SendMessage(self, request: Any, context: Any) -> Any:
        if isinstance(request, frontappends.FrontSend):  # encoded by popfront
            return await self._send(request.converted, request.message_ids, request.topics)
        return await self._send(
            [convert.outgoing_or_error(m) for m in request.messages],
            [m.system_properties.message_id for m in request.messages],
            {m.topic.name for m in request.messages},
        )

    async def _send(
        self, converted: list[frontappends.Converted], message_ids: list[str], topics: set[str]
    ) -> Any:
        if not converted:
            return service.SendMessageResponse(
                status=convert.status(Code.MESSAGE_CORRUPTED, "no message to send")
            )
        if len(topics) > 1:
            return service.SendMessageResponse(
                status=convert.status(Code.MESSAGE_CORRUPTED, "messages for several topics")
            )
        sendable = [m for m in converted if not isinstance(m, Exception)]
        outcomes = iter(await self._services.sender.send_batch(sendable))  # one store append
        response = service.SendMessageResponse()
        add = response.entries.add  # built in place: an entry passed to the constructor is copied
        ok = convert.ok()
        for message_id, item in zip(message_ids, converted, strict=True):
            outcome = item if isinstance(item, Exception) else next(outcomes)
            if isinstance(outcome, Exception):
                add(status=_failure(outcome, "SendMessage"), message_id=message_id)
            else:
                add(status=ok, message_id=outcome.message_id, offset=outcome.queue_offset)
        response.status.CopyFrom(_common_status([e.status for e in response.entries]))
        return response

    async def EndTransaction(self, request: Any, context: Any) -> Any:
        return service.EndTransactionResponse(
            status=convert.status(Code.UNSUPPORTED, "transactions are not supported")
        )

    # -- consuming ---------------------------------------------------------------------------

    async def ReceiveMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
        services = self._services
        remaining_s = context.time_remaining()
        client_id = _client_id(context)
        client = services.clients.get(client_id) if client_id is not None else None
        honour_queue_id = client is not None and client.kind is ClientKind.PUSH_CONSUMER

        async def receive() -> Any:
            wanted = convert.receive_request(
                request,
                deadline_remaining_ms=None if remaining_s is None else int(remaining_s * 1000),
                honour_queue_id=honour_queue_id,
            )
            if honour_queue_id and client_id is not None:  # pops only what it still holds
                wanted = services.router.guarded(
                    wanted, client_id=client_id, clients=services.clients
                )
            return await services.receiver.receive(wanted)

        delivered = await _answered("ReceiveMessage", receive)
        if context.done():
            _left_before_the_answer(delivered)
            return
        if isinstance(delivered, _Failed):
            yield service.ReceiveMessageResponse(status=delivered.status)
        elif delivered:
            yield service.ReceiveMessageResponse(status=convert.ok())
            namespace = request.group.resource_namespace
            to_front = front.DELIVERIES_TO_FRONT.get()
            for message in delivered:
                if context.done():  # the client went while the batch was being written
                    return
                if to_front and message.stored.record:  # popfront builds the Message
                    yield front.FrontDelivery(message, namespace, self._store_host)
                    continue
                yield service.ReceiveMessageResponse(
                    message=convert.delivered_message(
                        message, namespace=namespace, store_host=self._store_host
                    )
                )
        else:
            yield service.ReceiveMessageResponse(
                status=convert.status(Code.MESSAGE_NOT_FOUND, "no new message")
            )
        if context.done():
            return
        now = service.ReceiveMessageResponse()
        convert.set_timestamp_ms(now.delivery_timestamp, services.clock())
        yield now

    async def AckMessage(self, request: Any, context: Any) -> Any:
        requested = request.entries
        outcomes = await _answered(
            "AckMessage",
            functools.partial(
                self._services.acker.ack_many,
                group=request.group.name,
                topic=request.topic.name,
                receipt_handles=[entry.receipt_handle for entry in requested],
            ),
        )
        response = service.AckMessageResponse()
        add = response.entries.add
        ok = convert.ok()
        for index, entry in enumerate(requested):
            if isinstance(outcomes, _Failed):
                status = outcomes.status
            else:
                outcome = outcomes[index]
                status = ok if outcome is None else _failure(outcome, "AckMessage")
            add(message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=status)
        response.status.CopyFrom(_common_status([e.status for e in response.entries]))
        return response

    async def ChangeInvisibleDuration(self, request: Any, context: Any) -> Any:
        handle = await _answered(
            "ChangeInvisibleDuration",
            lambda: self._services.acker.change_invisible(
                group=request.group.name,
                topic=request.topic.name,
                receipt_handle=request.receipt_handle,
                invisible_ms=convert.duration_ms(request.invisible_duration),
            ),
        )
        if isinstance(handle, _Failed):
            return service.ChangeInvisibleDurationResponse(
                status=handle.status, receipt_handle=request.receipt_handle
            )
        return service.ChangeInvisibleDurationResponse(status=convert.ok(), receipt_handle=handle)

    # -- offset-based pulling (lite pull consumers) --------------------------------------------

    async def PullMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
        remaining_s = context.time_remaining()
        result = await _answered(
            "PullMessage",
            lambda: self._services.puller.pull(
                convert.pull_request(
                    request,
                    deadline_remaining_ms=None if remaining_s is None else int(remaining_s * 1000),
                )
            ),
        )
        if isinstance(result, _Failed):
            yield service.PullMessageResponse(status=result.status)
            return
        if result.messages:
            yield service.PullMessageResponse(status=convert.ok())
            namespace = request.message_queue.topic.resource_namespace
            for stored in result.messages:
                yield service.PullMessageResponse(
                    message=convert.pulled_message(
                        stored,
                        topic=request.message_queue.topic.name,
                        namespace=namespace,
                        store_host=self._store_host,
                    )
                )
        else:
            yield service.PullMessageResponse(
                status=convert.status(Code.MESSAGE_NOT_FOUND, "no new message")
            )
        yield service.PullMessageResponse(next_offset=result.next_queue_offset)

    async def GetOffset(self, request: Any, context: Any) -> Any:
        queue = request.message_queue
        offset = await _answered(
            "GetOffset",
            lambda: self._services.puller.get_offset(
                request.group.name, queue.topic.name, queue.id
            ),
        )
        if isinstance(offset, _Failed):
            return service.GetOffsetResponse(status=offset.status)
        return service.GetOffsetResponse(status=convert.ok(), offset=offset)

    async def UpdateOffset(self, request: Any, context: Any) -> Any:
        queue = request.message_queue
        updated = await _answered(
            "UpdateOffset",
            lambda: self._services.puller.update_offset(
                group=request.group.name,
                topic=queue.topic.name,
                queue_id=queue.id,
                queue_offset=request.offset,
            ),
        )
        if isinstance(updated, _Failed):
            return service.UpdateOffsetResponse(status=updated.status)
        return service.UpdateOffsetResponse(status=convert.ok())

    async def QueryOffset(self, request: Any, context: Any) -> Any:
        queue = request.message_queue
        offset = await _answered(
            "QueryOffset",
            lambda: self._services.puller.query_offset(
                queue.topic.name,
                queue.id,
                policy=convert.offset_policy(request.query_offset_policy),
                timestamp_ms=(
                    convert.timestamp_ms(request.timestamp)
                    if request.HasField("timestamp")
                    else None
                ),
            ),
        )
        if isinstance(offset, _Failed):
            return service.QueryOffsetResponse(status=offset.status)
        return service.QueryOffsetResponse(status=convert.ok(), offset=offset)

    async def ForwardMessageToDeadLetterQueue(self, request: Any, context: Any) -> Any:
        forwarded = await _answered(
            "ForwardMessageToDeadLetterQueue",
            lambda: self._services.acker.forward_to_dlq(
                group=request.group.name,
                topic=request.topic.name,
                receipt_handle=request.receipt_handle,
            ),
        )
        if isinstance(forwarded, _Failed):
            return service.ForwardMessageToDeadLetterQueueResponse(status=forwarded.status)
        return service.ForwardMessageToDeadLetterQueueResponse(status=convert.ok())
