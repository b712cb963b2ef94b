"""kstatus-style conditions with stable reasons.

Types: ``Ready``, ``Reconciling``, ``Degraded`` on every kind, plus ``TopicSynced`` (Topic)
and ``ModeApplied`` (ConsumerGroup). Reasons are CamelCase constants below; messages are for
people. :func:`merge` keeps a condition's ``lastTransitionTime`` unless its status flips, so
``kubectl wait`` and alerting see real transitions, not every resync.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

READY = "Ready"
RECONCILING = "Reconciling"
DEGRADED = "Degraded"
TOPIC_SYNCED = "TopicSynced"
MODE_APPLIED = "ModeApplied"

# Stable reasons.
ALL_BROKERS_READY = "AllBrokersReady"
BROKERS_NOT_READY = "BrokersNotReady"
ALL_BROKERS_CONFIRMED = "AllBrokersConfirmed"
PENDING_BROKERS = "PendingBrokers"
BROKER_UNREACHABLE = "BrokerUnreachable"
BROKER_REFUSED = "BrokerRefused"
SCALING = "Scaling"
SCALE_DOWN_BLOCKED = "ScaleDownBlocked"
ROLLING_UPDATE = "RollingUpdate"  # pods restart one at a time onto a new pod template
ROLLOUT_STUCK = "RolloutStuck"  # an updated broker is not healthy: the rollout stopped
UNDER_REPLICATED = "UnderReplicated"  # a replicated set has no leader, or replicas out of sync
ROLLOUT_COMPLETE = "RolloutComplete"  # Event: every broker on the new template
BROKER_UPDATED = "BrokerUpdated"  # Event: one broker confirmed, the next may go
LEADER_HANDED_OVER = "LeaderHandedOver"  # Event: a set's leader handed over before its restart
HAND_OVER_FAILED = "HandOverFailed"  # Warning: a leader did not (or cannot) hand over
RECONCILED = "Reconciled"
AS_EXPECTED = "AsExpected"
INVALID_SPEC = "InvalidSpec"
RESOURCE_CONFLICT = "ResourceConflict"
CLUSTER_NOT_FOUND = "ClusterNotFound"
PAUSED = "ReconciliationPaused"
UNMANAGED = "Unmanaged"
DELETION_BLOCKED = "DeletionBlocked"
TOPIC_MISSING = "TopicMissing"


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: bool | None  # None = Unknown
    reason: str
    message: str = ""

    @property
    def status_text(self) -> str:
        return "Unknown" if self.status is None else str(self.status)


def merge(
    existing: Iterable[Mapping[str, Any]],
    updates: Sequence[Condition],
    *,
    now: str,
    generation: int,
) -> list[dict[str, Any]]:
    """The condition list after ``updates``: transition times kept unless the status flips.

    Conditions in ``existing`` that ``updates`` does not mention are kept as they are.
    The result is sorted by type so that an unchanged status patches to the same bytes.
    """
    by_type = {str(c["type"]): dict(c) for c in existing if "type" in c}
    for update in updates:
        previous = by_type.get(update.type)
        flipped = previous is None or previous.get("status") != update.status_text
        by_type[update.type] = {
            "type": update.type,
            "status": update.status_text,
            "reason": update.reason,
            "message": update.message,
            "observedGeneration": generation,
            "lastTransitionTime": now
            if flipped or previous is None
            else previous.get("lastTransitionTime", now),
        }
    return [by_type[t] for t in sorted(by_type)]


def find(conditions: Iterable[Mapping[str, Any]], type_: str) -> Mapping[str, Any] | None:
    return next((c for c in conditions if c.get("type") == type_), None)


def is_true(conditions: Iterable[Mapping[str, Any]], type_: str) -> bool:
    found = find(conditions, type_)
    return found is not None and found.get("status") == "True"
