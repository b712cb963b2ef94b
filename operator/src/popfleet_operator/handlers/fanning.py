"""Shared steps of the Topic and ConsumerGroup reconcilers (both fan out to every broker).

A kind is one :class:`Declared` value (``topics.TOPICS``, ``groups.GROUPS``): its names, its
spec parser, its sync, its backlog measure, its delete call and its ``status.brokers``
entry. The kinds' kopf handlers (module level in ``topics`` and ``groups``) hand it to
:func:`run` (change handlers and the resync timer), :func:`release` (the finalizer) and
:func:`claims` (the claim index).

``reconcile`` as named steps:

1. ``unmanaged`` / ``paused``: do nothing to brokers, say so;
2. ``parse``: ``declared.parse(name, spec)`` (``InvalidSpec`` -> ``PermanentError`` +
   condition);
3. ``claim``: the oldest CR declaring this name on this cluster wins; others get
   ``Ready=False, ResourceConflict`` and touch nothing;
4. ``target``: the referenced BrokerCluster (missing -> ``ClusterNotFound``), its admin
   token and the broker pods it should have (ordinals below ``spec.brokers``), from the
   view all the cluster's objects share (``clients.clusterviews``: one load per cluster
   per ``POPFLEET_CLUSTER_VIEW_TTL_S``, invalidated by cluster and pod events);
4a. ``unchanged`` (resync ticks only): the status says synced for this generation, no
   broker's config epoch moved (one ``info`` per broker per cluster, shared) and the
   object's full read-back is not due (``POPFLEET_VERIFY_INTERVAL_S``, phase from its
   uid): stop here, no broker call and no write (``planning.resync``);
5. ``sync``: ``declared.sync(admins, spec)``: apply + read back on every broker
   (``clients.fanout``); step 5 holds one of ``runtime.ROUND_LIMIT`` slots
   (``$POPFLEET_ROUND_LIMIT``), so a burst of objects queues here rather than on the API
   client and the brokers; edits wait in a lane before new objects, and those before
   resyncs (``planning.lanes``);
5a. ``held``: the object is confirmed for its current generation (a resync tick, or a change
   round for an edit of its labels or annotations only, which moves no generation) and the
   only trouble is a broker silent for less than ``POPFLEET_UNREACHABLE_AFTER_S``: keep the
   status, write nothing, read again next tick (``planning.silence``: slow is not gone);
6. ``report``: per-broker status (``declared.entry``), conditions, Events (``Reapplied``
   for a broker this round found with a new config epoch), metrics; unreachable brokers ->
   ``TemporaryError`` with back-off from change handlers (timers simply try again next
   tick).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import kopf

from popfleet_api.client import BrokerAdminApi
from popfleet_operator import errors
from popfleet_operator.clients import fanout
from popfleet_operator.handlers import metrics, runtime
from popfleet_operator.model import names, specs, switches
from popfleet_operator.model.observations import BrokerOutcome
from popfleet_operator.planning import conflicts, lanes, resync
from popfleet_operator.status import conditions as c
from popfleet_operator.status import epochs
from popfleet_operator.status import fanout as fanout_status


class FannedSpec(Protocol):
    """What the shared steps need of a parsed Topic or ConsumerGroup spec."""

    @property
    def cluster(self) -> str: ...

    @property
    def delete_on_broker(self) -> bool: ...


SpecT = TypeVar("SpecT", bound=FannedSpec)
Claims = kopf.Index[tuple[str, str, str], conflicts.Claim]
VERIFIED_SLOT = "verified_slot"  # per-object memo: the verify period of the last full round


@dataclass(frozen=True, slots=True)
class Declared(Generic[SpecT]):
    """One fanned-out kind: its names and how to parse, sync, report, measure and delete it."""

    kind: str  # "Topic" / "ConsumerGroup"
    plural: str  # the CRD's plural, for kopf's resource
    domain: str  # the domain condition type
    name_field: str  # spec and status field holding the broker-side name
    parse: Callable[[str, Mapping[str, Any]], SpecT]  # (CR name, spec) or InvalidSpec
    broker_name: Callable[[SpecT], str]
    sync: Callable[[fanout.Admins, SpecT], Awaitable[Sequence[BrokerOutcome]]]
    entry: Callable[[BrokerOutcome], dict[str, Any]]  # one ``status.brokers`` entry
    backlog: Callable[[BrokerAdminApi, SpecT], Awaitable[int | None]]
    delete: Callable[[fanout.Admins, str], Awaitable[dict[str, str]]]

    @property
    def resource(self) -> tuple[str, str, str]:
        """(group, version, plural): what the kind's kopf decorators watch."""
        return (names.GROUP, names.VERSION, self.plural)


@dataclass(frozen=True, slots=True)
class Target:
    """The brokers of the referenced cluster: their admin APIs and who is expected."""

    admins: fanout.Admins
    expected: tuple[str, ...]


def claim_key(namespace: str, cluster: str, broker_name: str) -> tuple[str, str, str]:
    return (namespace, cluster, broker_name)


def claim_of(meta: kopf.Meta) -> conflicts.Claim:
    return conflicts.Claim(
        str(meta.get("creationTimestamp", "")), str(meta.get("uid", "")), str(meta["name"])
    )


def owner_of(index: Claims, key: tuple[str, str, str]) -> conflicts.Claim | None:
    return conflicts.winner(list(index.get(key, [])))


def claims(
    declared: Declared[Any], *, namespace: str | None, name: str, spec: kopf.Spec, meta: kopf.Meta
) -> dict[tuple[str, str, str], conflicts.Claim]:
    """The claim index's entry for one CR: (namespace, cluster, broker-side name) -> claim."""
    broker_name = str(spec.get(declared.name_field) or name)
    cluster = str((spec.get("clusterRef") or {}).get("name", ""))
    return {claim_key(namespace or "", cluster, broker_name): claim_of(meta)}


async def target(rt: runtime.Runtime, namespace: str, cluster: str) -> Target:
    """The cluster's brokers, from the view all its objects share (``rt.views``)."""
    view = await rt.views.get(namespace, cluster)
    if view is None:
        raise errors.ClusterNotFound(f"BrokerCluster {cluster!r} not found in {namespace}")
    return Target(admins=rt.pool.for_pods(view.pods, view.token), expected=view.expected)


def reapplied_events(
    body: kopf.Body, outcomes: Sequence[BrokerOutcome], previous: Sequence[Mapping[str, Any]]
) -> None:
    """``Reapplied`` for each broker found with a new config epoch this round.

    This is where the re-apply after a broker came back empty is observed (the BrokerCluster
    only announced it: ``wakeups``): the outcome is this round's read-back on that broker.
    """
    by_broker = {o.broker: o for o in outcomes}
    for broker, old, new in epochs.epoch_changes(
        previous, {o.broker: o.config_epoch for o in outcomes}
    ):
        outcome = by_broker[broker]
        done = "re-applied" if outcome.synced else f"re-applying ({outcome.error or 'pending'})"
        kopf.event(
            body,
            type="Normal",
            reason="Reapplied",
            message=f"{broker} came back with config epoch {new} (was {old}); {done}",
        )


def report(
    declared: Declared[Any],
    *,
    body: kopf.Body,
    patch: kopf.Patch,
    broker_name: str,
    outcomes: Sequence[BrokerOutcome],
    expected: Sequence[str],
) -> list[c.Condition]:
    ref = specs.ObjectRef.from_body(declared.kind, body)
    previous = (body.get("status") or {}).get("brokers") or []
    outcomes = fanout_status.with_missing(outcomes, expected, previous)
    conditions = fanout_status.fanout_conditions(declared.domain, outcomes, expected)
    reapplied_events(body, outcomes, previous)
    old_conditions = (body.get("status") or {}).get("conditions") or []
    if conditions[0].status and not c.is_true(old_conditions, declared.domain):
        kopf.event(body, type="Normal", reason=conditions[0].reason, message=conditions[0].message)
    runtime.write_status(
        patch,
        body,
        conditions,
        syncedBrokers=fanout_status.synced_text(outcomes, expected),
        brokers=fanout_status.broker_entries(outcomes, entry=declared.entry),
        **{declared.name_field: broker_name},
    )
    synced = sum(1 for o in outcomes if o.synced and o.broker in expected)
    metrics.BROKERS_IN_SYNC.labels(declared.kind, ref.namespace, ref.name).set(synced)
    metrics.BROKERS_EXPECTED.labels(declared.kind, ref.namespace, ref.name).set(len(expected))
    return conditions


def blocked(
    declared: Declared[Any], *, body: kopf.Body, patch: kopf.Patch, reason: str, message: str
) -> list[c.Condition]:
    conditions = fanout_status.blocked_conditions(reason, message, domain=declared.domain)
    old = (body.get("status") or {}).get("conditions") or []
    previous = c.find(old, c.READY)
    if previous is None or previous.get("reason") != reason:
        kopf.warn(body, reason=reason, message=message)
    runtime.write_status(patch, body, conditions)
    return conditions


async def unchanged(
    declared: Declared[Any], *, rt: runtime.Runtime, body: kopf.Body, memo: Any, where: Target
) -> bool:
    """Step 4a: a resync tick with nothing to do (``planning.resync``): skip the brokers."""
    uid = str(body["metadata"].get("uid", ""))
    now_s, verify_s = time.time(), runtime.VERIFY_INTERVAL_S
    if resync.verify_due(memo.get(VERIFIED_SLOT), uid, now_s=now_s, verify_s=verify_s):
        return False
    ref = specs.ObjectRef.from_body(declared.kind, body)
    cluster = str((body.get("spec") or {}).get("clusterRef", {}).get("name", ""))
    return resync.steady(
        body.get("status") or {},
        domain=declared.domain,
        generation=ref.generation,
        expected=where.expected,
        epochs=await rt.epochs.get(ref.namespace, cluster),
    )


def held(
    declared: Declared[Any],
    *,
    rt: runtime.Runtime,
    body: kopf.Body,
    cluster: str,
    outcomes: Sequence[BrokerOutcome],
    now_s: float,
) -> bool:
    """Step 5a: a round of an object confirmed for its current generation keeps its status
    while a broker is briefly silent (``planning.silence``); the next tick reads it again.

    Not only resync ticks: an edit of metadata alone (an annotation, a label) runs a change
    round for a generation already confirmed, and has nothing new to report either."""
    ref = specs.ObjectRef.from_body(declared.kind, body)
    rt.silence.observe(ref.namespace, cluster, outcomes, now_s=now_s)
    return resync.confirmed(
        body.get("status") or {}, domain=declared.domain, generation=ref.generation
    ) and rt.silence.hold(ref.namespace, cluster, outcomes, now_s=now_s)


async def reconcile(
    declared: Declared[SpecT],
    *,
    body: kopf.Body,
    patch: kopf.Patch,
    memo: Any,
    index: Claims,
    tick: bool = False,
) -> list[c.Condition]:
    """Steps 1-6 (module docstring) for one Topic or ConsumerGroup; ``tick``: a resync."""
    rt = runtime.get(memo)
    if switches.unmanaged(body):
        message = f"{names.MANAGED}=false"
        return blocked(declared, body=body, patch=patch, reason=c.UNMANAGED, message=message)
    if switches.paused(body):
        update = c.Condition(c.RECONCILING, False, c.PAUSED, f"annotation {names.PAUSED}=true")
        runtime.write_status(patch, body, [update])
        return [update]
    try:
        spec = declared.parse(body["metadata"]["name"], body["spec"])
    except errors.InvalidSpec as exc:
        blocked(declared, body=body, patch=patch, reason=c.INVALID_SPEC, message=exc.message)
        raise kopf.PermanentError(exc.message) from exc
    broker_name = declared.broker_name(spec)
    owner = owner_of(index, claim_key(body["metadata"]["namespace"], spec.cluster, broker_name))
    if owner is not None and owner != claim_of(body.metadata):
        message = conflicts.conflict_message(declared.kind, broker_name, owner)
        return blocked(
            declared, body=body, patch=patch, reason=c.RESOURCE_CONFLICT, message=message
        )
    try:
        where = await target(rt, body["metadata"]["namespace"], spec.cluster)
    except errors.ClusterNotFound as exc:
        return blocked(
            declared, body=body, patch=patch, reason=c.CLUSTER_NOT_FOUND, message=exc.message
        )
    except errors.InvalidSpec as exc:
        message = f"BrokerCluster {spec.cluster!r}: {exc.message}"
        return blocked(declared, body=body, patch=patch, reason=c.INVALID_SPEC, message=message)
    if tick and await unchanged(declared, rt=rt, body=body, memo=memo, where=where):
        return []
    generation = int(body["metadata"].get("generation", 0))
    priority = lanes.lane(tick=tick, generation=generation, status=body.get("status") or {})
    async with rt.rounds.hold(priority):
        outcomes = await declared.sync(where.admins, spec)
    now_s = time.monotonic()
    if held(declared, rt=rt, body=body, cluster=spec.cluster, outcomes=outcomes, now_s=now_s):
        return []
    memo[VERIFIED_SLOT] = resync.slot(
        str(body["metadata"].get("uid", "")), now_s=time.time(), verify_s=runtime.VERIFY_INTERVAL_S
    )
    return report(
        declared,
        body=body,
        patch=patch,
        broker_name=broker_name,
        outcomes=outcomes,
        expected=where.expected,
    )


async def run(
    declared: Declared[Any],
    *,
    body: kopf.Body,
    patch: kopf.Patch,
    memo: Any,
    logger: kopf.Logger,
    retry: int | None,
    index: Claims,
) -> None:
    """One round (``runtime.reconcile_round``); ``retry`` None for timer ticks (never raise)."""
    await runtime.reconcile_round(
        declared.kind,
        memo=memo,
        patch=patch,
        logger=logger,
        retry=retry,
        reconcile=lambda: reconcile(
            declared, body=body, patch=patch, memo=memo, index=index, tick=retry is None
        ),
    )


async def release(
    declared: Declared[SpecT],
    *,
    body: kopf.Body,
    patch: kopf.Patch,
    memo: Any,
    index: Claims,
) -> None:
    """The finalizer's work, as numbered steps.

    0. A spec that never parsed never reached the brokers: nothing to do.
    1. Retain policy, unmanaged, or another CR owns the name: leave the brokers alone.
    2. The cluster is gone or going: nothing left to delete; let go (no finalizer deadlock).
    3. Any backlog (or a broker that cannot tell): refuse, say why, retry later.
    4. Delete on every broker; any broker failing -> retry.
    """
    try:
        spec = declared.parse(body["metadata"]["name"], body["spec"])
    except errors.InvalidSpec:
        return
    broker_name = declared.broker_name(spec)
    ref = specs.ObjectRef.from_body(declared.kind, body)
    metrics.forget(declared.kind, ref.namespace, ref.name)
    owner = owner_of(index, claim_key(ref.namespace, spec.cluster, broker_name))
    if (
        not spec.delete_on_broker
        or switches.unmanaged(body)
        or (owner and owner != claim_of(body.metadata))
    ):
        kopf.event(
            body, type="Normal", reason="Retained", message=f"{broker_name!r} left on the brokers"
        )
        return
    rt = runtime.get(memo)
    try:
        where = await target(rt, ref.namespace, spec.cluster)
    except (errors.ClusterNotFound, errors.InvalidSpec) as exc:
        kopf.warn(body, reason="Released", message=f"{exc.message}; nothing to delete")
        return
    except errors.SecretNotFound as exc:
        raise kopf.TemporaryError(exc.message, delay=max(5.0, runtime.RESYNC_S)) from exc
    found = await fanout.backlogs(where.admins, lambda admin: declared.backlog(admin, spec))
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
    failures = {b: e for b, e in (await declared.delete(where.admins, broker_name)).items() if e}
    if failures:
        raise kopf.TemporaryError(f"delete failed on {failures}", delay=5)
    kopf.event(
        body,
        type="Normal",
        reason="Deleted",
        message=f"{broker_name!r} deleted on {len(where.admins)} brokers",
    )
