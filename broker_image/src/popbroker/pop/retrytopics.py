"""Retry and dead-letter topic names, and the one dead-letter rule.

Purpose: revive copies every un-acked message of an expired checkpoint either
to the group's retry topic or, past the group's max reconsume times, to its
dead-letter topic; FIFO pop dead-letters a message it would otherwise hand
out once too often; a client may forward a message to the DLQ itself. This
module owns those names, the "retries exhausted" test and the shape of a
dead-letter copy, so all three paths follow one rule.

Names (DESIGN §3.1, fact sheet §3.6):

  * retry: ``%RETRY%<group>+<topic>`` — RocketMQ's v2 naming. ``+`` is not a
    legal character in user topic or group names, so the name is unambiguous
    and reverse-parsable (v1's ``%RETRY%<group>_<topic>`` lets ``("g_a",
    "t")`` and ``("g", "a_t")`` collide, upstream #7543/#9633). We never
    produce v1 names.
  * dead letter: ``%DLQ%<group>``.

Dead-letter semantics (RocketMQ 5; DLQ policy upstream #8332 / fact sheet
§3.7 — **the broker enforces the max reconsume times itself** instead of
relying on clients or a proxy), as numbered rules:

  1. ``delivered_times`` is how often the message was handed out already.
     Retries are :func:`exhausted` when ``delivered_times >
     max_reconsume_times``: with the default 16 a message is delivered at most
     17 times (RocketMQ's ``maxAttempts = retryMaxTimes + 1``); with 0 the
     first expiry goes straight to the DLQ. Revive passes ``reconsume_times +
     1`` (the expired delivery counts); FIFO pop passes the message's count of
     earlier deliveries, so a FIFO message goes to the DLQ when its reconsume
     times reach the maximum and it would be delivered once more (RocketMQ's
     orderly rule ``reconsumeTimes >= maxReconsumeTimes`` after the failed
     attempt).
  2. A message read from a retry topic is retried into the *same* retry topic
     (a retry of a retry never nests names); a retry copy carries
     ``reconsume_times + 1``.
  3. A dead-letter copy (:func:`dead_letter`) goes to ``%DLQ%<group>`` queue 0,
     carries ``reconsume_times = delivered_times``, and keeps every property;
     ``ORIGIN_TOPIC`` (RocketMQ's ``RETRY_TOPIC``) is set to the user topic
     **only if it is not set yet**: the first hop names the original topic and
     a later hop (retry topic → DLQ) never overwrites it. Retry copies follow
     the same property rule (:func:`with_origin`).
  4. "Exactly once" into the DLQ is the revive ledger's job (one task per
     un-acked index, completed once); see :mod:`popbroker.pop.reviving`.

Callers: the revive services (target of each re-put), the popack services
(retry topic to read for a group, real topic of an ack for a retry handle,
FIFO dead letters, forward to DLQ).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from popbroker.pop import errors

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
RETRY_V2_SEPARATOR = "+"
DEFAULT_MAX_RECONSUME_TIMES = 16
# On retry and dead-letter copies: the topic the message was sent to (RocketMQ's RETRY_TOPIC).
PROPERTY_ORIGIN_TOPIC = "ORIGIN_TOPIC"


def retry_topic(group: str, topic: str) -> str:
    """The v2 POP retry topic of ``group`` consuming ``topic``; a retry topic maps to itself."""
    if is_retry_topic(topic):
        return topic
    if RETRY_V2_SEPARATOR in group or RETRY_V2_SEPARATOR in topic:
        raise errors.IllegalRetryTopic(f"'+' is not allowed in group {group!r} or topic {topic!r}")
    return f"{RETRY_PREFIX}{group}{RETRY_V2_SEPARATOR}{topic}"


def dlq_topic(group: str) -> str:
    """The dead-letter topic of ``group``."""
    return f"{DLQ_PREFIX}{group}"


def is_retry_topic(topic: str) -> bool:
    """True for any retry topic name (``%RETRY%`` prefix)."""
    return topic.startswith(RETRY_PREFIX)


def parse_retry_topic(topic: str) -> tuple[str, str]:
    """``(group, original_topic)`` of a v2 retry topic name.

    Raises :class:`IllegalRetryTopic` for anything else.
    """
    if not is_retry_topic(topic):
        raise errors.IllegalRetryTopic(f"{topic!r} is not a retry topic")
    group, separator, original = topic[len(RETRY_PREFIX) :].partition(RETRY_V2_SEPARATOR)
    if not separator or not group or not original or RETRY_V2_SEPARATOR in original:
        raise errors.IllegalRetryTopic(f"{topic!r} is not a v2 retry topic")
    return group, original


def original_topic(topic: str) -> str:
    """The user topic behind ``topic``: itself, or the topic a v2 retry topic stands for."""
    if is_retry_topic(topic):
        return parse_retry_topic(topic)[1]
    return topic


@dataclass(frozen=True, slots=True)
class RetryTarget:
    """Where revive puts one un-acked message, and with which reconsume times."""

    topic: str
    queue_id: int
    reconsume_times: int
    dead_letter: bool


def exhausted(delivered_times: int, max_reconsume_times: int) -> bool:
    """True when a message handed out ``delivered_times`` times goes to the DLQ (rule 1)."""
    if delivered_times < 0 or max_reconsume_times < 0:
        raise errors.IllegalReconsumeTimes("reconsume times must not be negative")
    return delivered_times > max_reconsume_times


def retry_or_dlq(
    *,
    group: str,
    topic: str,
    reconsume_times: int,
    max_reconsume_times: int = DEFAULT_MAX_RECONSUME_TIMES,
) -> RetryTarget:
    """Decide the target of a message read from ``topic`` that was not acked in time.

    ``topic`` is the checkpoint's topic (original or retry); ``reconsume_times``
    is the message's current count. See the module docstring for the rule.
    """
    if reconsume_times < 0:
        raise errors.IllegalReconsumeTimes("reconsume times must not be negative")
    next_times = reconsume_times + 1
    if exhausted(next_times, max_reconsume_times):
        return RetryTarget(
            topic=dlq_topic(group), queue_id=0, reconsume_times=next_times, dead_letter=True
        )
    return RetryTarget(
        topic=retry_topic(group, topic), queue_id=0, reconsume_times=next_times, dead_letter=False
    )


def with_origin(properties: Mapping[str, str], *, original_topic: str) -> dict[str, str]:
    """A copy of ``properties`` naming ``original_topic`` unless an earlier hop did (rule 3)."""
    copied = dict(properties)
    copied.setdefault(PROPERTY_ORIGIN_TOPIC, original_topic)
    return copied


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """What a dead-letter copy of a message is: where it goes and what it carries."""

    topic: str
    queue_id: int
    properties: dict[str, str]
    reconsume_times: int


def dead_letter(
    *,
    group: str,
    original_topic: str,
    properties: Mapping[str, str],
    delivered_times: int,
) -> DeadLetter:
    """The dead-letter copy of a message of ``group`` sent to ``original_topic`` (rule 3).

    ``original_topic`` is the user topic (not a retry topic);
    ``delivered_times`` how often the message was handed out.
    """
    if delivered_times < 0:
        raise errors.IllegalReconsumeTimes("reconsume times must not be negative")
    return DeadLetter(
        topic=dlq_topic(group),
        queue_id=0,
        properties=with_origin(properties, original_topic=original_topic),
        reconsume_times=delivered_times,
    )
