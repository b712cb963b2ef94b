"""Rolling updates of a replicated cluster: set by set, followers first, then the leader
after it has handed over (issue 18).

A replicated cluster has one StatefulSet per replica index: ``NAME`` (replica 0, pods
``NAME-i``) and ``NAME-r1``, ``NAME-r2`` (pods ``NAME-r1-i``, ...); broker set ``i`` is
``{NAME-i, NAME-r1-i, NAME-r2-i}``, its leader the holder of its Lease. Each StatefulSet's
``partition`` P lets the controller replace only its pods with ordinal >= P (see
``planning.rollout``); the operator writes the partitions every round, so it decides which
single pod of the cluster the controller may replace next. :func:`plan`, as numbered steps:

1. An index whose StatefulSet does not exist yet: P = 0 (creating pods is not gated).
2. While the controller has not observed an index's latest spec (and this round's apply
   does not change its template), every partition stays as written.
3. No index has a rollout pending (every pod on its update revision, revisions equal, no
   template change this round): every P = 0.
4. The sets are taken from the highest ordinal down, as the single-replica rollout takes
   pods. In a set, its **followers first** (in replica-index order), **then its leader**.
   A pod is *confirmed* when it is on the update revision, Ready, not terminating, and back
   in the set: a follower in the Lease's in-sync set, the leader healthy this round (its
   admin API answered, it serves, it holds the pushed member list). The rollout is at the
   first pod not confirmed:

   * on the update revision already (replaced, coming back): wait for it; *stuck* when one
     of its containers cannot run or it is not confirmed ``ready_timeout_s`` after its
     creation (``planning.rollout``'s rule), and the rollout goes no further;
   * the set's **leader**, not updated: it is not replaced while it leads. When a follower
     of its set is confirmed (so updated and in sync), the plan asks the leader to hand over
     to it (:attr:`ReplicaRolloutPlan.hand_over`; the caller calls the admin API's
     ``HandOver``); the next round, the Lease names the successor and the old leader is a
     follower like the others. Only when no follower is confirmed (a set of one live
     replica), or the leader refused or cannot hand over (``no_hand_over``: replication off
     on it, an older broker without ``HandOver``), is it replaced while leading; its
     graceful stop still releases the Lease;
   * a set whose Lease exists and names no holder (an election or a hand-over under way):
     wait for its next leader;
   * any other pod: it is the next one replaced, its index's P moves to its ordinal, unless
     replacing it would take a Ready pod down while another pod of the cluster is missing,
     terminating or not Ready (one pod away at a time, as the PDB over all broker pods).

   So each set is restarted with one replica away at a time, costs exactly one planned
   hand-over (none when its leader is already updated), and never loses its leader to a
   restart while an updated in-sync follower could take over.
5. Each index's P: ordinals above the set the rollout is at are done; in that set, P is
   its ordinal for the indexes whose pod is updated or is the one replaced now, else one
   above. Raising a P is capped as ``planning.rollout`` step 6 caps it: it never passes an
   ordinal whose pod is missing or not on the current revision (it would come back rolled
   back).

Pure: the caller reads the StatefulSets, pods, Leases and health, and builds the templates'
hashes. Pods at or above ``replicas`` (a scale-down's leaving brokers) are ignored.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from popfleet_operator.model import names
from popfleet_operator.model.observations import BrokerPod, SetLease, StatefulSetState
from popfleet_operator.planning import rollout


@dataclass(frozen=True, slots=True)
class ReplicaIndex:
    """One replica index as observed: its StatefulSet, whether this round's apply changes
    its pod template, and its pods by ordinal (named as they are: ``NAME-r1-0``)."""

    state: StatefulSetState | None
    template_changed: bool
    pods: Mapping[int, BrokerPod]


@dataclass(frozen=True, slots=True)
class HandOver:
    """Ask ``leader`` (a pod name) to hand broker set ``broker`` over to ``successor``."""

    broker: str
    leader: str
    successor: str


@dataclass(frozen=True, slots=True)
class ReplicaRolloutPlan:
    """Every index's partition (``partitions[0]`` is ``NAME``'s), and the rollout as
    ``planning.rollout.RolloutPlan`` reports it (its ``partition`` is ``NAME``'s, its
    ``updated`` the sets whose every replica is updated); ``hand_over``: the hand-over to
    ask for this round (None: none)."""

    partitions: tuple[int, ...]
    rolling: rollout.RolloutPlan
    hand_over: HandOver | None = None


@dataclass(frozen=True, slots=True)
class _Member:
    """One replica of a set: its index, pod name, pod (None: missing) and whether that pod
    is on its index's update revision."""

    replica: int
    name: str
    pod: BrokerPod | None
    updated: bool


def _away(pod: BrokerPod | None) -> bool:
    return pod is None or not pod.ready or pod.terminating


def _confirmed(member: _Member, lease: SetLease | None, *, healthy: bool) -> bool:
    """Updated, Ready, staying, and back in its set (step 4)."""
    if member.pod is None or not member.updated or _away(member.pod):
        return False
    if lease is None:  # no Lease yet (replication turned on by this rollout)
        return healthy if member.replica == 0 else True
    return healthy if member.name == lease.leader else member.name in lease.in_sync


def pod_name(cluster: str, replica: int, ordinal: int) -> str:
    return f"{names.replica_statefulset(cluster, replica)}-{ordinal}"


def _update_revision(index: ReplicaIndex) -> str:
    if index.state is None or index.template_changed:
        return ""
    return index.state.update_revision


def _pending(index: ReplicaIndex, replicas: int) -> bool:
    if index.state is None:
        return False
    update = _update_revision(index)
    return (
        index.template_changed
        or index.state.current_revision != update
        or any(p.revision != update for o, p in index.pods.items() if o < replicas)
    )


def plan(
    *,
    cluster: str,
    replicas: int,
    indexes: Sequence[ReplicaIndex],
    leases: Mapping[str, SetLease],
    health: Mapping[str, str],
    now_s: float,
    ready_timeout_s: float = rollout.READY_TIMEOUT_S,
    no_hand_over: Collection[str] = (),
) -> ReplicaRolloutPlan:
    """The partitions for this round's apply (steps 1-5 of the module docstring).

    ``leases``: set name (``NAME-i``) -> its Lease; ``health``: set name -> "" when the pod
    serving it (its leader) was found healthy this round, else why not (no entry: not
    asked); ``no_hand_over``: leader pods not to ask (they refused, or cannot)."""
    if any(
        i.state is not None and not i.template_changed and not i.state.status_current
        for i in indexes
    ):  # step 2
        held = tuple(0 if i.state is None else i.state.partition for i in indexes)
        message = "rolling: waiting for the StatefulSet controller to observe the latest spec"
        return ReplicaRolloutPlan(held, rollout.RolloutPlan(held[0], rolling=True, message=message))
    updates = [_update_revision(i) for i in indexes]
    changed = any(i.template_changed for i in indexes)
    done_sets = sum(
        all(
            (p := i.pods.get(s)) is not None and bool(u) and p.revision == u
            for i, u in zip(indexes, updates, strict=True)
        )
        for s in range(replicas)
    )
    if replicas <= 0 or not any(_pending(i, replicas) for i in indexes):  # steps 1, 3
        return ReplicaRolloutPlan(
            tuple(0 for _ in indexes),
            rollout.RolloutPlan(0, updated=done_sets, update_revision=updates[0]),
        )

    def on_update(r: int, pod: BrokerPod | None) -> bool:
        return pod is not None and bool(updates[r]) and pod.revision == updates[r]

    at: tuple[int, int] | None = None  # (ordinal, replica) the rollout is at
    released = False  # the pod at ``at`` may be replaced now
    hand_over: HandOver | None = None
    message = stuck = ""
    for s in range(replicas - 1, -1, -1):  # step 4
        broker = names.pod(cluster, s)
        lease = leases.get(broker)
        leader = lease.leader if lease is not None else ""
        members = [
            _Member(r, pod_name(cluster, r, s), (pod := i.pods.get(s)), on_update(r, pod))
            for r, i in enumerate(indexes)
        ]
        healthy = health.get(broker) == ""
        # followers first, one already away (not Ready, missing) before one taken down
        order = sorted(members, key=lambda m: (m.name == leader, not _away(m.pod), m.replica))
        pending = [m for m in order if not _confirmed(m, lease, healthy=healthy)]
        if not pending:
            continue
        r, name, pod = pending[0].replica, pending[0].name, pending[0].pod
        at = (s, r)
        if on_update(r, pod):
            progress = f"{done_sets}/{replicas} brokers updated"
            why = (
                health.get(broker, "not asked")
                if name == leader or lease is None
                else "not back in the in-sync set"
            )
            stuck = rollout.stuck_reason(
                pod, {name: why}, now_s=now_s, ready_timeout_s=ready_timeout_s
            )
            message = (
                f"rollout stuck: {stuck}; the rollout goes no further"
                if stuck
                else f"rolling: {progress}; waiting for {name} to be Ready and back in sync"
            )
            break
        if lease is not None and not leader:
            message = f"rolling: {broker} has no leader now; waiting for the next one"
            break
        if name == leader and name not in no_hand_over:
            successors = [
                m.name for m in order if m.name != leader and _confirmed(m, lease, healthy=healthy)
            ]
            if successors:
                hand_over = HandOver(broker, leader, successors[0])
                message = (
                    f"rolling: {broker}'s followers are updated; its leader {leader} hands "
                    f"over to {successors[0]} before it restarts"
                )
                break
        others_away = [
            pod_name(cluster, r2, s2)
            for r2, i in enumerate(indexes)
            for s2 in range(replicas)
            if (r2, s2) != (r, s) and i.state is not None and _away(i.pods.get(s2))
        ]
        if not _away(pod) and others_away:
            verb = "is" if len(others_away) == 1 else "are"
            message = (
                f"rolling: {name} is next and waits while {', '.join(others_away)} {verb} "
                "not Ready (one broker pod away at a time)"
            )
            break
        released = True
        role = "its leader, which cannot hand over" if name == leader else "a follower"
        message = f"rolling: {done_sets}/{replicas} brokers updated; replacing {name} ({role})"
        break

    partitions = []
    for r, index in enumerate(indexes):  # step 5
        if index.state is None or at is None:
            partitions.append(0)
            continue
        s, r_at = at
        pod = index.pods.get(s)
        wanted = s if on_update(r, pod) or (r == r_at and released) else s + 1
        if wanted > index.state.partition:
            cap = rollout.raise_cap(index.state, index.pods, replicas)
            wanted = max(index.state.partition, min(wanted, cap))
        partitions.append(wanted)
    if at is None:
        message = ""
    next_pod = pod_name(cluster, at[1], at[0]) if at is not None and released else ""
    return ReplicaRolloutPlan(
        tuple(partitions),
        rollout.RolloutPlan(
            partitions[0],
            rolling=at is not None,
            message=message,
            stuck=stuck,
            next=next_pod,
            updated=done_sets,
            update_revision=updates[0],
            template_changed=changed,
        ),
        hand_over,
    )
