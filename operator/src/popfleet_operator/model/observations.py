"""What the operator saw: broker pods and what each broker answered (plain values).

``clients`` produce these (:func:`broker_pod` and :func:`statefulset_state` read them from
raw Kubernetes bodies, purely); ``planning`` and ``status`` turn them into decisions and
status.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from popfleet_operator.model import names


@dataclass(frozen=True, slots=True)
class BrokerPod:
    """One broker pod as the Kubernetes API shows it.

    ``revision`` is the StatefulSet controller revision the pod was made from (its
    ``controller-revision-hash`` label); ``created_s`` its creation time (Unix seconds);
    ``problem`` a container that cannot run (``"store: ErrImagePull"``), "" when none.
    """

    name: str
    ordinal: int
    pod_ip: str | None
    ready: bool
    terminating: bool = False
    revision: str = ""
    created_s: float | None = None
    problem: str = ""

    def endpoint(self, port: int) -> str | None:
        return f"{self.pod_ip}:{port}" if self.pod_ip else None


@dataclass(frozen=True, slots=True)
class StatefulSetState:
    """The broker StatefulSet as the API shows it: what the rollout rule reads.

    ``partition`` is ``spec.updateStrategy.rollingUpdate.partition`` (0 when unset);
    ``current_revision``/``update_revision`` come from ``status`` and are only meaningful
    when :attr:`status_current` (the controller has seen the latest spec); ``template_hash``
    is the operator's annotation for the pod template it last applied.
    """

    replicas: int
    partition: int
    generation: int
    observed_generation: int
    current_revision: str
    update_revision: str
    template_hash: str

    @property
    def status_current(self) -> bool:
        return bool(self.update_revision) and self.observed_generation >= self.generation


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A broker pod and what its admin API said (``reachable`` False: it said nothing)."""

    pod: BrokerPod
    reachable: bool
    config_epoch: str = ""
    serving: bool = False
    error: str = ""


@dataclass(frozen=True, slots=True)
class BrokerOutcome:
    """One broker's read-back after a Topic or ConsumerGroup fan-out round: what both share.

    ``synced`` only when the broker, read back after any write, matches the spec exactly.
    A plain ``BrokerOutcome`` is a broker that said nothing of the object (unreachable, no
    pod yet, or refused before any read); the kinds' answers are :class:`TopicOutcome` and
    :class:`GroupOutcome`. ``missing_topics``: topics the object needs that the broker lacks
    (a group's subscriptions; always empty for a Topic).
    """

    broker: str
    synced: bool
    reachable: bool = True
    config_epoch: str = ""
    missing_topics: tuple[str, ...] = ()
    error: str = ""
    wrote: bool = False


@dataclass(frozen=True, slots=True)
class TopicOutcome(BrokerOutcome):
    """A Topic as the broker holds it: write queue count and permission ("" when absent)."""

    queues: int | None = None
    perm: str = ""


@dataclass(frozen=True, slots=True)
class GroupOutcome(BrokerOutcome):
    """A group's consume mode as read back (``MIXED`` when its topics disagree)."""

    mode: str = ""
    pop_share_queue_num: int | None = None


# ---------------------------------------------------------------- reading raw bodies

# Container waiting reasons of a pod that is still starting normally. popack and revive exit
# until the store's socket exists, so a young pod shows a CrashLoopBackOff or two: only
# CRASH_LOOP_RESTARTS restarts of one container make it a problem.
_STARTING = frozenset({"ContainerCreating", "PodInitializing"})
CRASH_LOOP_RESTARTS = 3


def _problem(status: Mapping[str, Any]) -> str:
    """The first container that cannot run (image, config, crash loop), "" when none."""
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        reason = str(waiting.get("reason") or "")
        restarts = int(container.get("restartCount") or 0)
        if not reason or reason in _STARTING:
            continue
        if reason == "CrashLoopBackOff" and restarts < CRASH_LOOP_RESTARTS:
            continue
        detail = f"{restarts} restarts" if reason == "CrashLoopBackOff" else ""
        detail = detail or str(waiting.get("message") or "")[:200]
        return f"{container.get('name')}: {reason}" + (f" ({detail})" if detail else "")
    return ""


def _timestamp_s(value: object) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True, slots=True)
class SetLease:
    """A replicated broker set's Lease as its stores keep it: ``broker`` the set (the
    Lease's name, ``NAME-i``), ``leader`` its holder ("" while none holds it), ``term``,
    and the recorded in-sync set (the leader included)."""

    broker: str
    leader: str
    term: int
    in_sync: tuple[str, ...]


def set_lease(raw: Mapping[str, Any]) -> SetLease:
    meta, spec = raw["metadata"], raw.get("spec") or {}
    annotations = meta.get("annotations") or {}
    try:
        term = int(annotations.get(names.TERM_ANNOTATION, "0"))
    except ValueError:
        term = 0
    members = str(annotations.get(names.IN_SYNC_ANNOTATION, ""))
    return SetLease(
        broker=str(meta["name"]),
        leader=str(spec.get("holderIdentity") or ""),
        term=term,
        in_sync=tuple(sorted(m for m in members.split(",") if m)),
    )


def broker_pod(cluster: str, pod: Mapping[str, Any]) -> BrokerPod | None:
    """A raw Pod of ``cluster`` as a :class:`BrokerPod`; None when its name is no ordinal
    (a pod of a replica StatefulSet ``NAME-r<r>`` among them: see :func:`serving_pods`)."""
    name = str(pod["metadata"]["name"])
    ordinal = names.ordinal(cluster, name)
    return None if ordinal is None else _as_broker_pod(pod, name=name, ordinal=ordinal)


def serving_pods(cluster: str, raw_pods: Iterable[Mapping[str, Any]]) -> list[BrokerPod]:
    """The pod that serves each broker of ``cluster`` (its admin API takes the writes), named
    by its broker (``NAME-i``), ordered by ordinal.

    Without replication that is pod ``NAME-i`` itself. With it, set ``i`` is the pods
    ``NAME-i``, ``NAME-r1-i``, ...: the one its leader labelled ``popfleet.io/leader=true``
    (a follower refuses writes), else replica 0's while no pod says it leads (an election
    under way; its writes then fail as retriable, ``NOT_LEADER``)."""
    best: dict[int, tuple[tuple[int, int], BrokerPod]] = {}
    for raw in raw_pods:
        meta = raw["metadata"]
        where = names.replica_of(cluster, str(meta["name"]))
        if where is None:
            continue
        replica, ordinal = where
        pod = _as_broker_pod(raw, name=names.pod(cluster, ordinal), ordinal=ordinal)
        leads = (meta.get("labels") or {}).get(names.LABEL_LEADER) == "true"
        rank = (0 if leads and not pod.terminating else 1, replica)
        if ordinal not in best or rank < best[ordinal][0]:
            best[ordinal] = (rank, pod)
    return [best[i][1] for i in sorted(best)]


def replica_pods(
    cluster: str, raw_pods: Iterable[Mapping[str, Any]]
) -> dict[int, dict[int, BrokerPod]]:
    """Replica index -> ordinal -> pod, every broker pod of ``cluster`` under its own name
    (``NAME-1``, ``NAME-r1-1``): what a replicated cluster's rollout reads."""
    out: dict[int, dict[int, BrokerPod]] = {}
    for raw in raw_pods:
        name = str(raw["metadata"]["name"])
        where = names.replica_of(cluster, name)
        if where is not None:
            replica, ordinal = where
            out.setdefault(replica, {})[ordinal] = _as_broker_pod(raw, name=name, ordinal=ordinal)
    return out


def _as_broker_pod(pod: Mapping[str, Any], *, name: str, ordinal: int) -> BrokerPod:
    meta = pod["metadata"]
    status = pod.get("status") or {}
    conditions = status.get("conditions") or []
    return BrokerPod(
        name=name,
        ordinal=ordinal,
        pod_ip=status.get("podIP") or None,
        ready=any(x.get("type") == "Ready" and x.get("status") == "True" for x in conditions),
        terminating=bool(meta.get("deletionTimestamp")),
        revision=str((meta.get("labels") or {}).get(names.LABEL_REVISION, "")),
        created_s=_timestamp_s(meta.get("creationTimestamp")),
        problem=_problem(status),
    )


def statefulset_state(sts: Mapping[str, Any] | None) -> StatefulSetState | None:
    """The broker StatefulSet's replicas, partition, revisions and template hash."""
    if sts is None:
        return None
    meta, spec, status = sts["metadata"], sts.get("spec") or {}, sts.get("status") or {}
    rolling = (spec.get("updateStrategy") or {}).get("rollingUpdate") or {}
    return StatefulSetState(
        replicas=int(spec.get("replicas", 1)),
        partition=int(rolling.get("partition") or 0),
        generation=int(meta.get("generation") or 0),
        observed_generation=int(status.get("observedGeneration") or 0),
        current_revision=str(status.get("currentRevision") or ""),
        update_revision=str(status.get("updateRevision") or ""),
        template_hash=str((meta.get("annotations") or {}).get(names.TEMPLATE_HASH, "")),
    )
