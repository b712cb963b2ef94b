"""Does a broker's read-back match the spec? Decides the writes of a fan-out round.

A broker matches when it reports exactly the declared values; for queue counts a broker
with *more* queues than declared cannot be fixed (queues never shrink) and is reported, not
written. Modes match only when explicitly set: a broker that lost its config answers the
PULL/0 default with ``explicitly_set=False`` and gets the mode written again.
"""

from __future__ import annotations

import enum

from popfleet_api import models
from popfleet_operator.model.specs import GroupSpec


class TopicAction(enum.Enum):
    NONE = "none"
    PUT = "put"
    CANNOT_SHRINK = "cannot-shrink"


def topic_action(desired: models.Topic, observed: models.Topic | None) -> TopicAction:
    if observed is None:
        return TopicAction.PUT
    if (
        observed.read_queue_nums > desired.read_queue_nums
        or observed.write_queue_nums > desired.write_queue_nums
    ):
        return TopicAction.CANNOT_SHRINK
    if topic_matches(desired, observed):
        return TopicAction.NONE
    return TopicAction.PUT


def topic_matches(desired: models.Topic, observed: models.Topic | None) -> bool:
    return observed is not None and (
        observed.read_queue_nums,
        observed.write_queue_nums,
        observed.perm,
        observed.message_type,
    ) == (desired.read_queue_nums, desired.write_queue_nums, desired.perm, desired.message_type)


def group_matches(desired: models.Group, observed: models.Group | None) -> bool:
    return observed is not None and (
        observed.max_reconsume_times,
        observed.retry_policy,
        observed.fifo,
        observed.consume_enable,
    ) == (desired.max_reconsume_times, desired.retry_policy, desired.fifo, True)


def mode_matches(spec: GroupSpec, observed: models.ConsumeModeSetting | None) -> bool:
    return (
        observed is not None
        and observed.explicitly_set
        and observed.mode == spec.consume_mode
        and observed.pop_share_queue_num == spec.pop_share_queue_num
    )
