"""Which permission each v2 RPC needs, read from its request message.

===============================  ====================================================
RPC                              needs
===============================  ====================================================
QueryRoute                       publish or subscribe on the topic
SendMessage, RecallMessage,      publish on the (every message's) topic
EndTransaction
ReceiveMessage, PullMessage,     the group, and subscribe on the queue's topic
GetOffset, UpdateOffset
AckMessage,                      the group, and subscribe on the topic
ChangeInvisibleDuration,
ForwardMessageToDeadLetterQueue,
QueryAssignment
QueryOffset                      subscribe on the queue's topic
Heartbeat,                       the group when one is named
NotifyClientTermination,
SyncLiteSubscription
Telemetry                        a valid credential to open the stream; then each
                                 ``settings`` command (:func:`authorize_settings`):
                                 a subscription needs its group and subscribe on its
                                 topics, publishing needs publish on its topics
===============================  ====================================================

Settings are checked because they register the client as a live consumer of
its group, which shapes the group's queue assignment.

An RPC this table does not know is refused (:class:`Forbidden`): a new RPC in a
newer client must be placed here before anyone may call it with credentials.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from popbroker.auth.accounts import Account
from popbroker.auth.errors import Forbidden


def _route(account: Account, request: Any) -> None:
    account.check_route(request.topic.name)


def _send(account: Account, request: Any) -> None:
    for message in request.messages:
        account.check_publish(message.topic.name)


def _publish_topic(account: Account, request: Any) -> None:
    account.check_publish(request.topic.name)


def _consume_queue(account: Account, request: Any) -> None:
    account.check_group(request.group.name)
    account.check_subscribe(request.message_queue.topic.name)


def _consume_topic(account: Account, request: Any) -> None:
    account.check_group(request.group.name)
    account.check_subscribe(request.topic.name)


def _query_offset(account: Account, request: Any) -> None:
    account.check_subscribe(request.message_queue.topic.name)


def _named_group(account: Account, request: Any) -> None:
    if request.HasField("group") and request.group.name:
        account.check_group(request.group.name)


def _nothing(account: Account, request: Any) -> None:
    return None


CHECKS: dict[str, Callable[[Account, Any], None]] = {
    "QueryRoute": _route,
    "SendMessage": _send,
    "RecallMessage": _publish_topic,
    "EndTransaction": _publish_topic,
    "ReceiveMessage": _consume_queue,
    "PullMessage": _consume_queue,
    "GetOffset": _consume_queue,
    "UpdateOffset": _consume_queue,
    "AckMessage": _consume_topic,
    "ChangeInvisibleDuration": _consume_topic,
    "ForwardMessageToDeadLetterQueue": _consume_topic,
    "QueryAssignment": _consume_topic,
    "QueryOffset": _query_offset,
    "Heartbeat": _named_group,
    "NotifyClientTermination": _named_group,
    "SyncLiteSubscription": _named_group,
    "Telemetry": _nothing,
}


def authorize_settings(account: Account, settings: Any) -> None:
    """Raise :class:`Forbidden` unless ``account`` may announce these Telemetry ``settings``."""
    if settings.WhichOneof("pub_sub") == "subscription":
        account.check_group(settings.subscription.group.name)
        for entry in settings.subscription.subscriptions:
            account.check_subscribe(entry.topic.name)
    elif settings.WhichOneof("pub_sub") == "publishing":
        for topic in settings.publishing.topics:
            account.check_publish(topic.name)


def authorize(account: Account, rpc: str, request: Any) -> None:
    """Raise :class:`Forbidden` unless ``account`` may make ``request`` to ``rpc``."""
    check = CHECKS.get(rpc)
    if check is None:
        raise Forbidden(f"{rpc} is not open to credentialed clients")
    check(account, request)
