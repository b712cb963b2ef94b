"""Status of a Topic or ConsumerGroup from its per-broker read-back.

The domain condition (``TopicSynced`` / ``ModeApplied``) and ``Ready`` are True only when
every expected broker (each pod of the cluster's declared size) confirmed on read-back.
``Degraded`` names the brokers that could not be reached or refused; ``Reconciling`` names
the ones still pending (no pod yet, or written this round and not yet confirmed). One
function per condition, over one :class:`Tally` of the round; one ``status.brokers`` entry
function per kind (:func:`topic_entry`, :func:`group_entry`, named by ``fanning.Declared``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from popfleet_operator.model.observations import BrokerOutcome, GroupOutcome, TopicOutcome
from popfleet_operator.status import conditions as c


def with_missing(
    outcomes: Sequence[BrokerOutcome],
    expected: Sequence[str],
    previous: Sequence[Mapping[str, Any]],
) -> list[BrokerOutcome]:
    """Outcomes plus a pending entry for each expected broker that had no pod this round.

    A broker that said nothing (no pod, or unreachable while its pod restarts) keeps its
    last known config epoch, so that when it comes back with an empty volume the change is
    still noticed (and reported as re-applied).
    """
    seen = {o.broker for o in outcomes}
    epochs = {str(p.get("name")): str(p.get("configEpoch") or "") for p in previous}
    outcomes = [
        o if o.config_epoch else replace(o, config_epoch=epochs.get(o.broker, "")) for o in outcomes
    ]
    missing = [
        BrokerOutcome(b, synced=False, config_epoch=epochs.get(b, ""))
        for b in expected
        if b not in seen
    ]
    return sorted([*outcomes, *missing], key=lambda o: o.broker)


def synced_text(outcomes: Sequence[BrokerOutcome], expected: Sequence[str]) -> str:
    confirmed = {o.broker for o in outcomes if o.synced}
    return f"{len(confirmed & set(expected))}/{len(expected)}"


def _common_entry(o: BrokerOutcome) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": o.broker, "synced": o.synced, "lastError": o.error}
    if o.config_epoch:
        entry["configEpoch"] = o.config_epoch
    return entry


def topic_entry(o: BrokerOutcome) -> dict[str, Any]:
    """A Topic's ``status.brokers`` entry: queues and permission as the broker holds them."""
    entry = _common_entry(o)
    if isinstance(o, TopicOutcome):
        if o.queues is not None:
            entry["queues"] = o.queues
        if o.perm:
            entry["perm"] = o.perm
    return entry


def group_entry(o: BrokerOutcome) -> dict[str, Any]:
    """A ConsumerGroup's ``status.brokers`` entry: the consume mode as read back."""
    entry = _common_entry(o)
    if isinstance(o, GroupOutcome):
        if o.mode:
            entry["mode"] = o.mode
        if o.pop_share_queue_num is not None:
            entry["popShareQueueNum"] = o.pop_share_queue_num
    return entry


def broker_entries(
    outcomes: Sequence[BrokerOutcome], *, entry: Callable[[BrokerOutcome], dict[str, Any]]
) -> list[dict[str, Any]]:
    """``status.brokers``, by broker name; ``entry`` is the kind's (:func:`topic_entry`...)."""
    return [entry(o) for o in sorted(outcomes, key=lambda o: o.broker)]


def _names(items: Sequence[str]) -> str:
    return ", ".join(sorted(items))


@dataclass(frozen=True, slots=True)
class Tally:
    """This round's outcomes sorted by what the conditions say about them."""

    expected: tuple[str, ...]
    all_confirmed: bool
    unreachable: tuple[str, ...]
    refused: tuple[BrokerOutcome, ...]
    missing_topics: tuple[str, ...]
    pending: tuple[str, ...]

    @classmethod
    def of(cls, outcomes: Sequence[BrokerOutcome], expected: Sequence[str]) -> Tally:
        by_broker = {o.broker: o for o in outcomes}
        pending = [b for b in expected if b not in by_broker or not by_broker[b].reachable]
        pending += [o.broker for o in outcomes if o.reachable and not o.synced and not o.error]
        return cls(
            expected=tuple(expected),
            all_confirmed=bool(expected)
            and all(b in by_broker and by_broker[b].synced for b in expected),
            unreachable=tuple(o.broker for o in outcomes if not o.reachable),
            refused=tuple(o for o in outcomes if o.reachable and not o.synced and o.error),
            missing_topics=tuple(sorted({t for o in outcomes for t in o.missing_topics})),
            pending=tuple(sorted(set(pending))),
        )

    def refusals(self) -> str:
        return "; ".join(f"{o.broker}: {o.error}" for o in self.refused)


def domain_condition(domain: str, tally: Tally) -> c.Condition:
    """``TopicSynced`` / ``ModeApplied``: every expected broker confirmed, or the first reason
    why not (no brokers, missing topics, unreachable, refused, pending)."""
    if tally.all_confirmed:
        message = f"all {len(tally.expected)} brokers confirmed"
        return c.Condition(domain, True, c.ALL_BROKERS_CONFIRMED, message)
    if not tally.expected:
        return c.Condition(domain, False, c.PENDING_BROKERS, "the cluster has no brokers")
    if tally.missing_topics:
        message = (
            f"topics not on the brokers yet: {_names(tally.missing_topics)} "
            "(declare them as Topics)"
        )
        return c.Condition(domain, False, c.TOPIC_MISSING, message)
    if tally.unreachable:
        message = f"unreachable: {_names(tally.unreachable)}"
        return c.Condition(domain, False, c.BROKER_UNREACHABLE, message)
    if tally.refused:
        return c.Condition(domain, False, c.BROKER_REFUSED, tally.refusals())
    message = f"waiting for: {_names(tally.pending)}"
    return c.Condition(domain, False, c.PENDING_BROKERS, message)


def ready_condition(domain: c.Condition) -> c.Condition:
    """``Ready`` follows the domain condition, with its reason and message."""
    return c.Condition(c.READY, domain.status, domain.reason, domain.message)


def reconciling_condition(domain: c.Condition) -> c.Condition:
    """``Reconciling`` until the domain condition holds; then ``Reconciled``."""
    if domain.status:
        return c.Condition(c.RECONCILING, False, c.RECONCILED)
    return c.Condition(c.RECONCILING, True, domain.reason, domain.message)


def degraded_condition(tally: Tally) -> c.Condition:
    """``Degraded`` names the unreachable brokers, else the refusing ones."""
    if tally.unreachable:
        message = f"unreachable: {_names(tally.unreachable)}"
        return c.Condition(c.DEGRADED, True, c.BROKER_UNREACHABLE, message)
    if tally.refused:
        return c.Condition(c.DEGRADED, True, c.BROKER_REFUSED, tally.refusals())
    return c.Condition(c.DEGRADED, False, c.AS_EXPECTED)


def fanout_conditions(
    domain: str, outcomes: Sequence[BrokerOutcome], expected: Sequence[str]
) -> list[c.Condition]:
    """[domain, Ready, Reconciling, Degraded]; ``domain`` is ``TopicSynced`` or ``ModeApplied``."""
    tally = Tally.of(outcomes, expected)
    domain_cond = domain_condition(domain, tally)
    return [
        domain_cond,
        ready_condition(domain_cond),
        reconciling_condition(domain_cond),
        degraded_condition(tally),
    ]


def blocked_conditions(reason: str, message: str, *, domain: str) -> list[c.Condition]:
    """Conditions for an object the operator will not act on (conflict, bad spec, no cluster)."""
    return [
        c.Condition(c.READY, False, reason, message),
        c.Condition(domain, False, reason, message),
        c.Condition(c.RECONCILING, False, reason, message),
    ]
