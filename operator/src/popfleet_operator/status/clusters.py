"""BrokerCluster status from its pods and what their admin APIs answered."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from popfleet_operator.model import names
from popfleet_operator.model.observations import BrokerInfo, BrokerPod, SetLease
from popfleet_operator.status import conditions as c


def broker_entries(
    infos: Sequence[BrokerInfo], *, previous: Sequence[Mapping[str, Any]] = ()
) -> list[dict[str, Any]]:
    """One status entry per broker; one that said nothing keeps its last known config epoch
    (from ``previous``), so that coming back empty is still seen as an epoch change."""
    epochs = {str(p.get("name")): str(p.get("configEpoch") or "") for p in previous}
    entries = []
    for info in sorted(infos, key=lambda i: i.pod.ordinal):
        entry: dict[str, Any] = {
            "name": info.pod.name,
            "ready": info.pod.ready and info.reachable and info.serving,
            "lastError": info.error,
        }
        client = info.pod.endpoint(names.CLIENT_PORT)
        admin = info.pod.endpoint(names.ADMIN_PORT)
        if client and admin:
            entry["endpoint"] = client
            entry["adminEndpoint"] = admin
        epoch = info.config_epoch or epochs.get(info.pod.name, "")
        if epoch:
            entry["configEpoch"] = epoch
        entries.append(entry)
    return entries


def ready_count(infos: Sequence[BrokerInfo], *, desired: int) -> int:
    return sum(
        1 for i in infos if i.pod.ordinal < desired and i.pod.ready and i.reachable and i.serving
    )


def replication_entries(
    leases: Sequence[SetLease], *, expected: Sequence[str]
) -> list[dict[str, Any]]:
    """``status.replication``: each declared set's leader, term and in-sync replicas (a set
    whose stores have not made its Lease yet is left out)."""
    by_name = {lease.broker: lease for lease in leases}
    return [
        {
            "broker": lease.broker,
            "leader": lease.leader,
            "term": lease.term,
            "inSync": ",".join(lease.in_sync),
            "inSyncReplicas": len(lease.in_sync),
        }
        for lease in (by_name.get(b) for b in expected)
        if lease is not None
    ]


def under_replicated(
    leases: Sequence[SetLease], *, expected: Sequence[str], replicas: int, min_in_sync: int
) -> str:
    """Why a replicated cluster is under-replicated ("" when it is not): a set without a
    Lease or a leader, or with replicas out of its in-sync set (below ``min_in_sync`` its
    SYNC writes are refused)."""
    by_name = {lease.broker: lease for lease in leases}
    problems = []
    for broker in expected:
        lease = by_name.get(broker)
        if lease is None or not lease.leader:
            problems.append(f"{broker}: no leader")
        elif len(lease.in_sync) < replicas:
            refused = "; writes refused" if len(lease.in_sync) < min_in_sync else ""
            problems.append(f"{broker}: {len(lease.in_sync)}/{replicas} in sync{refused}")
    return ", ".join(problems)


def cluster_conditions(
    infos: Sequence[BrokerInfo],
    *,
    desired: int,
    replicas: int,
    blocked: str = "",
    rollout: str = "",
    stuck: str = "",
    replication: str = "",
) -> list[c.Condition]:
    """``replicas`` is what the StatefulSet was given (differs from ``desired`` while blocked).

    ``rollout`` describes a rolling update under way ("" when none): the cluster is not
    Ready until it is over (``kubectl wait --for=condition=Ready`` waits for the rollout),
    and ``Reconciling`` says where it is. ``stuck`` says why it stopped (``Degraded``).
    ``replication``: why a replicated cluster is under-replicated (``Degraded``, last).
    """
    ready = ready_count(infos, desired=desired)
    # A terminating pod is not asked (it is leaving: scale-down, rolling update, eviction).
    unreachable = sorted(
        i.pod.name for i in infos if i.pod.ready and not i.pod.terminating and not i.reachable
    )
    all_ready = ready == desired and replicas == desired
    if all_ready and not rollout:
        ready_cond = c.Condition(
            c.READY, True, c.ALL_BROKERS_READY, f"{ready}/{desired} brokers ready"
        )
    elif rollout:
        ready_cond = c.Condition(
            c.READY, False, c.ROLLING_UPDATE, f"{ready}/{desired} brokers ready; rolling update"
        )
    else:
        ready_cond = c.Condition(
            c.READY, False, c.BROKERS_NOT_READY, f"{ready}/{desired} brokers ready"
        )
    if blocked:
        reconciling = c.Condition(c.RECONCILING, True, c.SCALE_DOWN_BLOCKED, blocked)
    elif rollout:
        reconciling = c.Condition(c.RECONCILING, True, c.ROLLING_UPDATE, rollout)
    elif not all_ready:
        reconciling = c.Condition(
            c.RECONCILING, True, c.SCALING, f"{ready}/{desired} brokers ready"
        )
    else:
        reconciling = c.Condition(c.RECONCILING, False, c.RECONCILED)
    if stuck:
        degraded = c.Condition(c.DEGRADED, True, c.ROLLOUT_STUCK, stuck)
    elif unreachable:
        degraded = c.Condition(
            c.DEGRADED,
            True,
            c.BROKER_UNREACHABLE,
            "admin API not answering: " + ", ".join(unreachable),
        )
    elif blocked:
        degraded = c.Condition(c.DEGRADED, True, c.SCALE_DOWN_BLOCKED, blocked)
    elif replication:
        degraded = c.Condition(c.DEGRADED, True, c.UNDER_REPLICATED, replication)
    else:
        degraded = c.Condition(c.DEGRADED, False, c.AS_EXPECTED)
    return [ready_cond, reconciling, degraded]


def fingerprint(entries: Sequence[Mapping[str, Any]]) -> str:
    """What Topics and ConsumerGroups depend on: which brokers are up, where, at what epoch.

    When it changes (a broker became ready, moved, came back empty, joined or left), the
    cluster reconciler pokes every Topic and ConsumerGroup of the cluster so they re-apply
    at once instead of at their next resync.
    """
    key = sorted(
        (str(e.get("name")), str(e.get("endpoint", "")), str(e.get("configEpoch", "")))
        for e in entries
        if e.get("ready")
    )
    return hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]


def leases_fingerprint(leases: Sequence[SetLease]) -> str:
    """A replicated cluster's set Leases as status shows them: leader, term, in-sync set
    (not the renewals, which change every round and show nothing new)."""
    key = sorted((lease.broker, lease.leader, lease.term, list(lease.in_sync)) for lease in leases)
    return hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]


def pods_fingerprint(pods: Sequence[BrokerPod]) -> str:
    """The broker pods as far as the cluster reconciler cares: name, IP, ready, leaving,
    revision (a rolling update moves on when a pod comes back) and a container problem."""
    key = sorted(
        (p.name, p.pod_ip or "", p.ready, p.terminating, p.revision, p.problem) for p in pods
    )
    return hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]
