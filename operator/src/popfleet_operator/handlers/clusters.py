"""BrokerCluster: children, replicas, membership, rolling updates and status, as named steps.

``reconcile`` runs on create/update/resume, on every resync tick (level-based) and whenever
a broker pod changes (``wakeups.pod_changed`` wakes it):

1. ``paused``: leave everything as it is and say so;
2. ``parse``: the spec, or ``InvalidSpec`` -> ``PermanentError`` with a condition;
3. ``observe``: the StatefulSet (replicas, partition, revisions), broker pods, their admin
   APIs (config epochs);
4. ``plan_replicas``: scale-down only when the leaving brokers hold no backlog;
5. ``push_members``: the member list (pod IP endpoints) to every reachable broker;
6. ``plan_rollout``: the StatefulSet's update partition (``planning.rollout``): pods are
   replaced one at a time, each only after the one before came back Ready and re-applied;
   a replicated cluster's StatefulSets roll set by set, followers first, then each leader
   once it has handed over (``plan_replicated_rollout``, ``planning.replicarollout``);
7. ``apply_children``: server-side apply of every child (owner references set), the
   StatefulSet with this round's partition;
8. ``report``: status, conditions, Events for transitions (rollout steps included), metrics;
9. ``wakeups.poke_dependents``: when the brokers changed, wake this cluster's Topics and
   ConsumerGroups so they re-apply now (``wakeups`` draws the whole chain); before that,
   the cluster's shared view (``clients.clusterviews``) is invalidated so they read the
   pods and spec this round saw.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import kopf

from popfleet_api import errors as errors_api
from popfleet_operator import builders, errors
from popfleet_operator.builders import replication
from popfleet_operator.clients import fanout
from popfleet_operator.clients import kube as kube_client
from popfleet_operator.handlers import metrics, runtime, wakeups
from popfleet_operator.model import names, observations, specs, switches
from popfleet_operator.model.observations import BrokerInfo, BrokerPod, SetLease
from popfleet_operator.planning import membership, replicarollout, rollout, scaling
from popfleet_operator.status import clusters as cluster_status
from popfleet_operator.status import conditions as c
from popfleet_operator.status import epochs

KIND = "BrokerCluster"


async def plan_replicas(
    rt: runtime.Runtime,
    *,
    current: int | None,
    desired: int,
    pods: list[BrokerPod],
    token: str | None,
) -> scaling.ScalePlan:
    leaving_ordinals = set(scaling.leaving(current or 0, desired))
    leaving_pods = [p for p in pods if p.ordinal in leaving_ordinals]
    admins = rt.pool.for_pods(leaving_pods, token)
    found = await fanout.backlogs(admins, fanout.broker_backlog)
    backlog = {p.ordinal: found.get(p.name) for p in leaving_pods}
    return scaling.plan(current=current, desired=desired, backlog=backlog)


def plan_rollout(
    ref: specs.ObjectRef,
    spec: specs.ClusterSpec,
    sts: Mapping[str, Any] | None,
    *,
    replicas: int,
    pods: list[BrokerPod],
    health: Mapping[str, str],
) -> rollout.RolloutPlan:
    """The partition to apply: is the template changing, and where is the rollout?"""
    state = observations.statefulset_state(sts)
    changed = state is not None and state.template_hash != builders.pod_template_hash(ref, spec)
    return rollout.plan(
        cluster=ref.name,
        replicas=replicas,
        sts=state,
        template_changed=changed,
        pods=pods,
        health=health,
        now_s=time.time(),
        ready_timeout_s=runtime.ROLLOUT_READY_TIMEOUT_S,
    )


async def plan_replicated_rollout(
    rt: runtime.Runtime,
    ref: specs.ObjectRef,
    spec: specs.ClusterSpec,
    *,
    body: kopf.Body,
    sts: Mapping[str, Any] | None,
    replicas: int,
    by_replica: Mapping[int, Mapping[int, BrokerPod]],
    leases: list[SetLease],
    health: Mapping[str, str],
    token: str | None,
) -> replicarollout.ReplicaRolloutPlan:
    """A replicated cluster's partitions, set by set, followers first
    (``planning.replicarollout``). A leader whose followers are updated is asked to hand
    over (the admin API's ``HandOver``): the Lease's change wakes the next round, which
    replaces it as a follower. A leader that cannot hand over (replication off on it, a
    broker without ``HandOver``, no follower fits) is replaced this round as it is; one
    that failed for now (its successor not caught up) is asked again next round."""
    states = [observations.statefulset_state(sts)]
    for r in range(1, spec.replication.replicas):
        raw = await rt.kube.get_or_none(
            kube_client.path(
                "apps/v1",
                "StatefulSet",
                namespace=ref.namespace,
                name=names.replica_statefulset(ref.name, r),
            )
        )
        states.append(observations.statefulset_state(raw))
    indexes = [
        replicarollout.ReplicaIndex(
            state=state,
            template_changed=state is not None
            and state.template_hash != builders.pod_template_hash(ref, spec, r),
            pods=by_replica.get(r, {}),
        )
        for r, state in enumerate(states)
    ]
    by_set = {lease.broker: lease for lease in leases}

    def planned(no_hand_over: frozenset[str]) -> replicarollout.ReplicaRolloutPlan:
        return replicarollout.plan(
            cluster=ref.name, replicas=replicas, indexes=indexes, leases=by_set, health=health,
            now_s=time.time(), ready_timeout_s=runtime.ROLLOUT_READY_TIMEOUT_S,
            no_hand_over=no_hand_over,
        )  # fmt: skip

    plan = planned(frozenset())
    ask = plan.hand_over
    if ask is None:
        return plan
    pod = next(
        (
            p
            for by_ordinal in by_replica.values()
            for p in by_ordinal.values()
            if p.name == ask.leader
        ),
        None,
    )
    admin = rt.pool.for_pods([pod], token).get(ask.leader) if pod is not None else None
    if admin is None:
        return plan  # no IP yet, or going: the next round sees it again
    try:
        done = await admin.hand_over(ask.successor, timeout_ms=runtime.HAND_OVER_TIMEOUT_MS)
    except errors_api.AdminError as exc:
        if exc.retriable:
            kopf.warn(body, reason=c.HAND_OVER_FAILED,
                      message=f"{ask.leader} did not hand {ask.broker} over to {ask.successor} "
                      f"yet: {exc}; asked again next round")  # fmt: skip
            return plan
        kopf.warn(body, reason=c.HAND_OVER_FAILED,
                  message=f"{ask.leader} cannot hand {ask.broker} over: {exc}; it restarts "
                  "leading (its graceful stop releases the Lease)")  # fmt: skip
        return planned(frozenset({ask.leader}))
    kopf.event(
        body,
        type="Normal",
        reason=c.LEADER_HANDED_OVER,
        message=f"{ask.leader} handed {ask.broker} (term {done.term}) over to {done.successor} "
        "before its restart: its followers are updated",
    )
    return plan


async def prune_replicas(
    rt: runtime.Runtime, ref: specs.ObjectRef, spec: specs.ClusterSpec, *, status: Mapping[str, Any]
) -> None:
    """Replica StatefulSets beyond ``spec.replication.replicas`` are scaled to 0: their pods
    go, their claims stay (as on any scale-down), and the StatefulSet itself stays until
    the cluster goes (the operator may patch StatefulSets, never delete them); raising
    ``replicas`` again brings the pods back on their claims, as followers that catch up.
    Asked only of a cluster that is or was replicated (its status says so)."""
    if not spec.replication.enabled and not status.get("replication"):
        return
    for replica in range(max(1, spec.replication.replicas), spec.replication.MAX_REPLICAS):
        name = names.replica_statefulset(ref.name, replica)
        url = kube_client.path("apps/v1", "StatefulSet", namespace=ref.namespace, name=name)
        found = await rt.kube.get_or_none(url)
        if found is not None and (found.get("spec") or {}).get("replicas") != 0:
            await rt.kube.patch_merge(url, {"spec": {"replicas": 0}})


async def apply_children(
    rt: runtime.Runtime,
    ref: specs.ObjectRef,
    spec: specs.ClusterSpec,
    *,
    replicas: int,
    partition: int,
    replica_partitions: list[int] | None = None,
) -> None:
    if spec.replication.enabled:
        await ensure_replication_token(rt, ref)
    children = builders.children(
        ref,
        spec,
        replicas=replicas,
        partition=partition,
        replica_cluster_role=runtime.BROKER_REPLICA_CLUSTER_ROLE,
        replica_partitions=replica_partitions or [],
    )
    for child in children:
        await rt.kube.apply(child)


async def ensure_replication_token(rt: runtime.Runtime, ref: specs.ObjectRef) -> None:
    """The set token Secret (``builders.replication``): created once, kept as it is."""
    secret = replication.token_secret(ref)
    url = kube_client.path("v1", "Secret", namespace=ref.namespace, name=secret["metadata"]["name"])
    if await rt.kube.get_or_none(url) is not None:
        return
    try:
        await rt.kube.request("POST", url.rsplit("/", 1)[0], body=secret)
    except errors.KubeError as exc:
        if exc.status != 409:  # 409: made meanwhile (another round); that one stands
            raise


def rollout_status(
    plan: rollout.RolloutPlan, *, replicas: int, previous: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """``status.rollout`` while a rolling update is under way, None (removed) after it."""
    if not plan.rolling:
        return None
    revision = plan.update_revision or str((previous or {}).get("updateRevision") or "")
    return {
        "partition": plan.partition,
        "updatedBrokers": f"{plan.updated}/{replicas}",
        "updateRevision": revision,
        "message": plan.message,
    }


def report_rollout(
    body: kopf.Body,
    plan: rollout.RolloutPlan,
    *,
    replicas: int,
    previous: Mapping[str, Any] | None,
    template_hash_known: bool,
) -> None:
    """Events: a rollout starts, the partition moves past a broker, it is stuck, it is over.

    ``previous`` is the ``status.rollout`` of the last round (None: no rollout then).
    """
    if plan.template_changed and template_hash_known:
        kopf.event(
            body,
            type="Normal",
            reason=c.ROLLING_UPDATE,
            message="pod template changed: brokers restart one at a time, highest ordinal "
            "first, each Ready and re-applied before the next goes down",
        )
    for broker in plan.passed:
        then = f"; next {plan.next}" if plan.next else ""
        kopf.event(
            body,
            type="Normal",
            reason=c.BROKER_UPDATED,
            message=f"{broker} updated, Ready and re-applied{then}",
        )
    old_conditions = (body.get("status") or {}).get("conditions") or []
    degraded = c.find(old_conditions, c.DEGRADED) or {}
    if plan.stuck and degraded.get("reason") != c.ROLLOUT_STUCK:
        kopf.warn(body, reason=c.ROLLOUT_STUCK, message=f"{plan.stuck}; rollout stopped")
    if previous and previous.get("updateRevision") and not plan.rolling:
        kopf.event(
            body,
            type="Normal",
            reason=c.ROLLOUT_COMPLETE,
            message=f"all {replicas} brokers updated, Ready and re-applied "
            f"(revision {previous['updateRevision']})",
        )


def report(
    *,
    body: kopf.Body,
    patch: kopf.Patch,
    spec: specs.ClusterSpec,
    infos: list[BrokerInfo],
    plan: scaling.ScalePlan,
    member_errors: dict[str, str],
    rolling: rollout.RolloutPlan,
    template_hash_known: bool,
    leases: list[SetLease] | None = None,
) -> tuple[list[c.Condition], list[dict[str, Any]]]:
    """Status, conditions, Events and metrics; returns the conditions and ``status.brokers``.
    ``leases``: a replicated cluster's set Leases (None: not replicated)."""
    ref = specs.ObjectRef.from_body(KIND, body)
    expected = [i for i in infos if i.pod.ordinal < max(spec.brokers, plan.replicas)]
    with_errors = [
        BrokerInfo(
            i.pod,
            reachable=i.reachable,
            config_epoch=i.config_epoch,
            serving=i.serving,
            error=i.error or member_errors.get(i.pod.name, ""),
        )
        for i in expected
    ]
    ready = cluster_status.ready_count(with_errors, desired=spec.brokers)
    replication_fields: dict[str, Any] = {"replication": None}  # removed once not replicated
    under = ""
    if leases is not None:
        sets = [names.pod(ref.name, i) for i in range(spec.brokers)]
        replication_fields["replication"] = cluster_status.replication_entries(
            leases, expected=sets
        )
        under = cluster_status.under_replicated(
            leases,
            expected=sets,
            replicas=spec.replication.replicas,
            min_in_sync=spec.replication.min_in_sync_replicas,
        )
    conditions = cluster_status.cluster_conditions(
        with_errors,
        desired=spec.brokers,
        replicas=plan.replicas,
        blocked=plan.blocked,
        rollout=rolling.message if rolling.rolling else "",
        stuck=rolling.stuck,
        replication=under,
    )
    previous_rollout = (body.get("status") or {}).get("rollout")
    report_rollout(
        body,
        rolling,
        replicas=plan.replicas,
        previous=previous_rollout,
        template_hash_known=template_hash_known,
    )
    rollout_fields: dict[str, Any] = {}
    if rolling.rolling or previous_rollout:
        rollout_fields["rollout"] = rollout_status(
            rolling, replicas=plan.replicas, previous=previous_rollout
        )
    previous = (body.get("status") or {}).get("brokers") or []
    for broker, old, new in epochs.epoch_changes(
        previous, {i.pod.name: i.config_epoch for i in with_errors}
    ):
        kopf.event(
            body,
            type="Normal",
            reason="BrokerConfigEpochChanged",
            message=f"{broker}: config epoch {old} -> {new}; "
            "re-applying its topics, groups and modes",
        )
    old_conditions = (body.get("status") or {}).get("conditions") or []
    if plan.blocked and not c.is_true(old_conditions, c.DEGRADED):
        kopf.warn(body, reason=c.SCALE_DOWN_BLOCKED, message=plan.blocked)
    if conditions[0].status and not c.is_true(old_conditions, c.READY):
        kopf.event(body, type="Normal", reason=c.ALL_BROKERS_READY, message=conditions[0].message)
    entries = cluster_status.broker_entries(with_errors, previous=previous)
    runtime.write_status(
        patch,
        body,
        conditions,
        readyBrokers=ready,
        brokersReady=f"{ready}/{spec.brokers}",
        brokers=entries,
        **rollout_fields,
        **replication_fields,
    )
    metrics.READY_BROKERS.labels(ref.namespace, ref.name).set(ready)
    return conditions, entries


async def reconcile(body: kopf.Body, patch: kopf.Patch, memo: Any) -> list[c.Condition]:
    rt = runtime.get(memo)
    ref = specs.ObjectRef.from_body(KIND, body)
    if switches.paused(body):
        update = c.Condition(c.RECONCILING, False, c.PAUSED, f"annotation {names.PAUSED}=true")
        runtime.write_status(patch, body, [update])
        return [update]
    try:
        spec = specs.parse_cluster(body["spec"])
        token = await kube_client.admin_token(rt.kube, ref.namespace, spec)
    except errors.InvalidSpec as exc:
        updates = [
            c.Condition(c.READY, False, c.INVALID_SPEC, exc.message),
            c.Condition(c.RECONCILING, False, c.INVALID_SPEC, exc.message),
        ]
        runtime.write_status(patch, body, updates)
        raise kopf.PermanentError(exc.message) from exc
    except errors.SecretNotFound as exc:
        updates = [
            c.Condition(c.READY, False, exc.reason, exc.message),
            c.Condition(c.RECONCILING, True, exc.reason, exc.message),
        ]
        runtime.write_status(patch, body, updates)
        return updates
    sts = await rt.kube.get_or_none(
        kube_client.path(
            "apps/v1", "StatefulSet", namespace=ref.namespace, name=names.statefulset(ref.name)
        )
    )
    current = int(sts["spec"]["replicas"]) if sts else None
    pods, serving, by_replica = await kube_client.broker_pod_views(rt.kube, ref.namespace, ref.name)
    plan = await plan_replicas(rt, current=current, desired=spec.brokers, pods=serving, token=token)
    members_pods = [p for p in serving if p.ordinal < plan.replicas]
    admins = rt.pool.for_pods(members_pods, token)
    infos = await fanout.observe(members_pods, admins)
    reachable = {i.pod.name: admins[i.pod.name] for i in infos if i.reachable}
    member_errors = await fanout.push_members(
        reachable, membership.desired_members(members_pods, replicas=plan.replicas)
    )
    health = rollout.broker_health(infos, member_errors)
    leases = None
    replica_partitions: list[int] = []
    if spec.replication.enabled:
        leases = await kube_client.set_leases(rt.kube, ref.namespace, ref.name)
        replicated = await plan_replicated_rollout(
            rt, ref, spec, body=body, sts=sts, replicas=plan.replicas, by_replica=by_replica,
            leases=leases, health=health, token=token,
        )  # fmt: skip
        rolling, replica_partitions = replicated.rolling, list(replicated.partitions[1:])
    else:
        rolling = plan_rollout(ref, spec, sts, replicas=plan.replicas, pods=pods, health=health)
    await apply_children(
        rt,
        ref,
        spec,
        replicas=plan.replicas,
        partition=rolling.partition,
        replica_partitions=replica_partitions,
    )
    known = bool(sts and (sts["metadata"].get("annotations") or {}).get(names.TEMPLATE_HASH))
    await prune_replicas(rt, ref, spec, status=body.get("status") or {})
    conditions, entries = report(
        body=body,
        patch=patch,
        spec=spec,
        infos=infos,
        plan=plan,
        member_errors=member_errors,
        rolling=rolling,
        template_hash_known=known,
        leases=leases,
    )
    rt.forget_cluster(ref.namespace, ref.name)
    await wakeups.poke_dependents(rt, body, entries)
    return conditions


@kopf.on.resume(names.GROUP, names.VERSION, "brokerclusters")
@kopf.on.create(names.GROUP, names.VERSION, "brokerclusters")
@kopf.on.update(names.GROUP, names.VERSION, "brokerclusters")
async def changed(
    *,
    body: kopf.Body,
    patch: kopf.Patch,
    memo: kopf.Memo,
    logger: kopf.Logger,
    retry: int,
    **_: Any,
) -> None:
    await runtime.reconcile_round(
        KIND,
        memo=memo,
        patch=patch,
        logger=logger,
        retry=retry,
        reconcile=lambda: reconcile(body, patch, memo),
    )


@kopf.timer(names.GROUP, names.VERSION, "brokerclusters", interval=runtime.RESYNC_S, idle=None)
async def resync(
    *, body: kopf.Body, patch: kopf.Patch, memo: Any, logger: kopf.Logger, **_: Any
) -> None:
    await runtime.reconcile_round(
        KIND,
        memo=memo,
        patch=patch,
        logger=logger,
        retry=None,
        reconcile=lambda: reconcile(body, patch, memo),
    )
