"""Status of a Topic or ConsumerGroup from its per-broker read-back.

The domain condition (``TopicSynced`` / ``ModeApplied``) and ``Ready`` are True only when
every expected broker (each pod of the cluster's declared size) confirmed on read-back.
``Degraded`` names the brokers that could not be reached or refused; ``Reconciling`` names
the ones still pending (no pod yet, or written this round and not yet confirmed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from popfleet_operator.model.observations import BrokerOutcome
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


def broker_entries(outcomes: Sequence[BrokerOutcome], *, kind: str) -> list[dict[str, Any]]:
    entries = []
    for o in sorted(outcomes, key=lambda o: o.broker):
        entry: dict[str, Any] = {"name": o.broker, "synced": o.synced, "lastError": o.error}
        if o.config_epoch:
            entry["configEpoch"] = o.config_epoch
        if kind == "Topic":
            if o.queues is not None:
                entry["queues"] = o.queues
            if o.perm:
                entry["perm"] = o.perm
        else:
            if o.mode:
                entry["mode"] = o.mode
            if o.pop_share_queue_num is not None:
                entry["popShareQueueNum"] = o.pop_share_queue_num
        entries.append(entry)
    return entries


def _names(items: Sequence[str]) -> str:
    return ", ".join(sorted(items))


def fanout_conditions(
    domain: str, outcomes: Sequence[BrokerOutcome], expected: Sequence[str]
) -> list[c.Condition]:
    """``domain`` is ``TopicSynced`` or ``ModeApplied``."""
    by_broker = {o.broker: o for o in outcomes}
    unreachable = [o.broker for o in outcomes if not o.reachable]
    refused = [o for o in outcomes if o.reachable and not o.synced and o.error]
    missing_topics = sorted({t for o in outcomes for t in o.missing_topics})
    pending = [b for b in expected if b not in by_broker or not by_broker[b].reachable]
    pending += [o.broker for o in outcomes if o.reachable and not o.synced and not o.error]
    all_confirmed = bool(expected) and all(b in by_broker and by_broker[b].synced for b in expected)

    if all_confirmed:
        domain_cond = c.Condition(
            domain, True, c.ALL_BROKERS_CONFIRMED, f"all {len(expected)} brokers confirmed"
        )
    elif not expected:
        domain_cond = c.Condition(domain, False, c.PENDING_BROKERS, "the cluster has no brokers")
    elif missing_topics:
        domain_cond = c.Condition(
            domain,
            False,
            c.TOPIC_MISSING,
            f"topics not on the brokers yet: {_names(missing_topics)} (declare them as Topics)",
        )
    elif unreachable:
        domain_cond = c.Condition(
            domain, False, c.BROKER_UNREACHABLE, f"unreachable: {_names(unreachable)}"
        )
    elif refused:
        domain_cond = c.Condition(
            domain, False, c.BROKER_REFUSED, "; ".join(f"{o.broker}: {o.error}" for o in refused)
        )
    else:
        domain_cond = c.Condition(
            domain, False, c.PENDING_BROKERS, f"waiting for: {_names(sorted(set(pending)))}"
        )

    if unreachable:
        degraded = c.Condition(
            c.DEGRADED, True, c.BROKER_UNREACHABLE, f"unreachable: {_names(unreachable)}"
        )
    elif refused:
        degraded = c.Condition(
            c.DEGRADED, True, c.BROKER_REFUSED, "; ".join(f"{o.broker}: {o.error}" for o in refused)
        )
    else:
        degraded = c.Condition(c.DEGRADED, False, c.AS_EXPECTED)

    ready = c.Condition(c.READY, all_confirmed, domain_cond.reason, domain_cond.message)
    reconciling = (
        c.Condition(c.RECONCILING, False, c.RECONCILED)
        if all_confirmed
        else c.Condition(c.RECONCILING, True, domain_cond.reason, domain_cond.message)
    )
    return [domain_cond, ready, reconciling, degraded]


def blocked_conditions(reason: str, message: str, *, domain: str) -> list[c.Condition]:
    """Conditions for an object the operator will not act on (conflict, bad spec, no cluster)."""
    return [
        c.Condition(c.READY, False, reason, message),
        c.Condition(domain, False, reason, message),
        c.Condition(c.RECONCILING, False, reason, message),
    ]
