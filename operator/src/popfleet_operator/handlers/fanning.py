"""Shared steps of the Topic and ConsumerGroup reconcilers (both fan out to every broker).

``reconcile`` as named steps:

1. ``unmanaged`` / ``paused``: do nothing to brokers, say so;
2. ``parse``: the spec (``InvalidSpec`` -> ``PermanentError`` + condition);
3. ``claim``: the oldest CR declaring this name on this cluster wins; others get
   ``Ready=False, ResourceConflict`` and touch nothing;
4. ``target``: the referenced BrokerCluster (missing -> ``ClusterNotFound``), its admin
   token and the broker pods it should have (ordinals below ``spec.brokers``);
5. ``sync``: apply + read back on every broker (``clients.fanout``);
6. ``report``: per-broker status, conditions, Events (re-applied after a config-epoch
   change), metrics; unreachable brokers -> ``TemporaryError`` with back-off from change
   handlers (timers simply try again next tick).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import kopf

from popfleet_operator import errors
from popfleet_operator.clients import fanout
from popfleet_operator.clients import kube as kube_client
from popfleet_operator.handlers import metrics, runtime
from popfleet_operator.model import names, specs
from popfleet_operator.model.observations import BrokerOutcome
from popfleet_operator.planning import conflicts
from popfleet_operator.status import conditions as c
from popfleet_operator.status import fanout as fanout_status


@dataclass(frozen=True, slots=True)
class Target:
    """The brokers of the referenced cluster: their admin APIs and who is expected."""

    admins: fanout.Admins
    expected: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Kind:
    name: str  # "Topic" / "ConsumerGroup"
    domain: str  # the domain condition type
    name_field: str  # status field holding the broker-side name


TOPIC = Kind("Topic", c.TOPIC_SYNCED, "topicName")
GROUP = Kind("ConsumerGroup", c.MODE_APPLIED, "groupName")


def claim_key(namespace: str, cluster: str, broker_name: str) -> tuple[str, str, str]:
    return (namespace, cluster, broker_name)


def claim_of(meta: kopf.Meta) -> conflicts.Claim:
    return conflicts.Claim(
        str(meta.get("creationTimestamp", "")), str(meta.get("uid", "")), str(meta["name"])
    )


def owner_of(index: kopf.Index[Any, Any], key: tuple[str, str, str]) -> conflicts.Claim | None:
    return conflicts.winner(list(index.get(key, [])))


async def cluster_spec(
    rt: runtime.Runtime, namespace: str, cluster: str
) -> tuple[kopf.Body | dict[str, Any], specs.ClusterSpec] | None:
    body = await rt.kube.get_or_none(
        kube_client.path(names.API_VERSION, "BrokerCluster", namespace, cluster)
    )
    if body is None or body["metadata"].get("deletionTimestamp"):
        return None
    return body, specs.parse_cluster(body.get("spec") or {})


async def target(rt: runtime.Runtime, namespace: str, cluster: str) -> Target:
    found = await cluster_spec(rt, namespace, cluster)
    if found is None:
        raise errors.ClusterNotFound(f"BrokerCluster {cluster!r} not found in {namespace}")
    _, spec = found
    token = await runtime.admin_token(rt.kube, namespace, spec)
    pods = [
        p
        for p in await runtime.broker_pods(rt.kube, namespace, cluster)
        if p.ordinal < spec.brokers
    ]
    return Target(
        admins=rt.pool.for_pods(pods, token),
        expected=tuple(names.pod(cluster, i) for i in range(spec.brokers)),
    )


def report(
    kind: Kind,
    *,
    body: kopf.Body,
    patch: kopf.Patch,
    broker_name: str,
    outcomes: Sequence[BrokerOutcome],
    expected: Sequence[str],
) -> list[c.Condition]:
    ref = specs.ObjectRef.from_body(kind.name, body)
    previous = (body.get("status") or {}).get("brokers") or []
    outcomes = fanout_status.with_missing(outcomes, expected, previous)
    conditions = fanout_status.fanout_conditions(kind.domain, outcomes, expected)
    for broker, old, new in runtime.epoch_changes(
        previous, {o.broker: o.config_epoch for o in outcomes}
    ):
        kopf.event(
            body,
            type="Normal",
            reason="Reapplied",
            message=f"{broker} came back with config epoch {new} (was {old}); re-applied",
        )
    old_conditions = (body.get("status") or {}).get("conditions") or []
    if conditions[0].status and not c.is_true(old_conditions, kind.domain):
        kopf.event(body, type="Normal", reason=conditions[0].reason, message=conditions[0].message)
    runtime.write_status(
        patch,
        body,
        conditions,
        syncedBrokers=fanout_status.synced_text(outcomes, expected),
        brokers=fanout_status.broker_entries(outcomes, kind=kind.name),
        **{kind.name_field: broker_name},
    )
    synced = sum(1 for o in outcomes if o.synced and o.broker in expected)
    metrics.BROKERS_IN_SYNC.labels(kind.name, ref.namespace, ref.name).set(synced)
    metrics.BROKERS_EXPECTED.labels(kind.name, ref.namespace, ref.name).set(len(expected))
    return conditions


def blocked(
    kind: Kind, *, body: kopf.Body, patch: kopf.Patch, reason: str, message: str
) -> list[c.Condition]:
    conditions = fanout_status.blocked_conditions(reason, message, domain=kind.domain)
    old = (body.get("status") or {}).get("conditions") or []
    previous = c.find(old, c.READY)
    if previous is None or previous.get("reason") != reason:
        kopf.warn(body, reason=reason, message=message)
    runtime.write_status(patch, body, conditions)
    return conditions


Sync = Callable[[fanout.Admins], Awaitable[list[BrokerOutcome]]]


async def reconcile(
    kind: Kind,
    *,
    body: kopf.Body,
    patch: kopf.Patch,
    memo: Any,
    index: kopf.Index[Any, Any],
    parse: Callable[[], tuple[str, str, Sync]],
) -> list[c.Condition]:
    """``parse`` returns (cluster, broker-side name, the sync step) or raises InvalidSpec."""
    rt = runtime.get(memo)
    if runtime.unmanaged(body):
        return blocked(
            kind, body=body, patch=patch, reason=c.UNMANAGED, message=f"{names.MANAGED}=false"
        )
    if runtime.paused(body):
        update = c.Condition(c.RECONCILING, False, c.PAUSED, f"annotation {names.PAUSED}=true")
        runtime.write_status(patch, body, [update])
        return [update]
    try:
        cluster, broker_name, sync = parse()
    except errors.InvalidSpec as exc:
        blocked(kind, body=body, patch=patch, reason=c.INVALID_SPEC, message=exc.message)
        raise kopf.PermanentError(exc.message) from exc
    owner = owner_of(index, claim_key(body["metadata"]["namespace"], cluster, broker_name))
    if owner is not None and owner != claim_of(body.metadata):
        message = conflicts.conflict_message(kind.name, broker_name, owner)
        return blocked(kind, body=body, patch=patch, reason=c.RESOURCE_CONFLICT, message=message)
    try:
        where = await target(rt, body["metadata"]["namespace"], cluster)
    except errors.ClusterNotFound as exc:
        return blocked(
            kind, body=body, patch=patch, reason=c.CLUSTER_NOT_FOUND, message=exc.message
        )
    except errors.InvalidSpec as exc:
        message = f"BrokerCluster {cluster!r}: {exc.message}"
        return blocked(kind, body=body, patch=patch, reason=c.INVALID_SPEC, message=message)
    outcomes = await sync(where.admins)
    return report(
        kind,
        body=body,
        patch=patch,
        broker_name=broker_name,
        outcomes=outcomes,
        expected=where.expected,
    )


async def run(
    kind: Kind,
    *,
    body: kopf.Body,
    patch: kopf.Patch,
    memo: Any,
    logger: kopf.Logger,
    retry: int | None,
    index: kopf.Index[Any, Any],
    parse: Callable[[], tuple[str, str, Sync]],
) -> None:
    """One round (``runtime.reconcile_round``); ``retry`` None for timer ticks (never raise)."""
    await runtime.reconcile_round(
        kind.name,
        memo=memo,
        logger=logger,
        retry=retry,
        reconcile=lambda: reconcile(
            kind, body=body, patch=patch, memo=memo, index=index, parse=parse
        ),
    )


async def release(
    kind: Kind,
    *,
    body: kopf.Body,
    patch: kopf.Patch,
    memo: Any,
    index: kopf.Index[Any, Any],
    cluster: str,
    broker_name: str,
    delete_on_broker: bool,
    backlog: Callable[[fanout.Admins], Awaitable[dict[str, int | None]]],
    delete: Callable[[fanout.Admins], Awaitable[dict[str, str]]],
) -> None:
    """The finalizer's work, as numbered steps.

    1. Retain policy, unmanaged, or another CR owns the name: leave the brokers alone.
    2. The cluster is gone or going: nothing left to delete; let go (no finalizer deadlock).
    3. Any backlog (or a broker that cannot tell): refuse, say why, retry later.
    4. Delete on every broker; any broker failing -> retry.
    """
    ref = specs.ObjectRef.from_body(kind.name, body)
    metrics.forget(kind.name, ref.namespace, ref.name)
    owner = owner_of(index, claim_key(ref.namespace, cluster, broker_name))
    if (
        not delete_on_broker
        or runtime.unmanaged(body)
        or (owner and owner != claim_of(body.metadata))
    ):
        kopf.event(
            body, type="Normal", reason="Retained", message=f"{broker_name!r} left on the brokers"
        )
        return
    rt = runtime.get(memo)
    try:
        where = await target(rt, ref.namespace, cluster)
    except (errors.ClusterNotFound, errors.InvalidSpec) as exc:
        kopf.warn(body, reason="Released", message=f"{exc.message}; nothing to delete")
        return
    except errors.SecretNotFound as exc:
        raise kopf.TemporaryError(exc.message, delay=max(5.0, runtime.RESYNC_S)) from exc
    found = await backlog(where.admins)
    waiting = {b: n for b, n in found.items() if n != 0}
    if waiting or set(where.admins) != set(where.expected):
        detail = ", ".join(
            f"{b}: {'unknown' if n is None else f'{n} messages'}"
            for b, n in sorted(waiting.items())
        )
        missing = sorted(set(where.expected) - set(where.admins))
        if missing:
            detail = ", ".join(filter(None, [detail, "no pod yet: " + ", ".join(missing)]))
        message = f"deletionPolicy Delete waits for the backlog to drain ({detail})"
        runtime.write_status(
            patch, body, [c.Condition(c.READY, False, c.DELETION_BLOCKED, message)]
        )
        kopf.warn(body, reason=c.DELETION_BLOCKED, message=message)
        raise kopf.TemporaryError(message, delay=max(5.0, runtime.RESYNC_S / 2))
    failures = {b: e for b, e in (await delete(where.admins)).items() if e}
    if failures:
        raise kopf.TemporaryError(f"delete failed on {failures}", delay=5)
    kopf.event(
        body,
        type="Normal",
        reason="Deleted",
        message=f"{broker_name!r} deleted on {len(where.admins)} brokers",
    )
