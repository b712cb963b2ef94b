"""Rolling updates of the broker pods, one at a time, gated by the operator (Strimzi-style).

The StatefulSet's ``updateStrategy.rollingUpdate.partition`` P lets the StatefulSet controller
replace only the pods whose ordinal is >= P (highest first, each once the one before is
Running and Ready); pods below P keep, or are recreated at, the current revision. The
operator writes P with the StatefulSet every round and moves it down one pod at a time, past a
pod only once it has seen that pod come back on the update revision *confirmed*: Ready, not
terminating, and healthy this round (its admin API answered, it is serving, and it holds the
member list the operator pushed). Callers: ``handlers.clusters`` (the ``plan_rollout`` step).

:func:`plan`, as numbered steps:

1. No StatefulSet yet: P = 0 (creating the pods is not gated).
2. If this round's apply changes the pod template (the StatefulSet's template-hash
   annotation differs from the built one), a rollout starts: no pod is on the revision the
   apply creates. Otherwise, while the controller has not observed the latest spec
   (``observedGeneration < generation``) its revisions are stale, and P stays as written.
3. No rollout pending (``currentRevision == updateRevision`` and every existing pod
   ``0 .. replicas-1`` on it), or every pod ``0 .. replicas-1`` confirmed: P = 0.
4. k = the number of pods, counted from ordinal ``replicas-1`` down to the first that is
   not, that are confirmed on the update revision. The rollout is at pod ``s = replicas-1-k``;
   P = s lets the controller replace it.
5. One broker away at a time: if replacing pod s would take a Ready broker down (s is Ready
   and not on the update revision) while another broker of ``0 .. replicas-1`` is missing,
   terminating or not Ready, P = s+1 instead and the rollout waits.
6. Lowering P is always allowed. Raising it (a new rollout, an updated pod that fell ill)
   passes only ordinals whose pod exists on the current revision: below P the controller
   (re)creates pods at the current revision, so an updated pod deleted later (eviction,
   drain) would come back rolled back. An ordinal without a pod is never passed either: its
   last pod may have been updated before it went (a scale-down and up again, an eviction),
   and an ordinal this round's scale-up adds would start on the old template only to be
   replaced.
7. Pod s on the update revision and not confirmed is *stuck* when one of its containers
   cannot run (``BrokerPod.problem``: image, config, crash loop) or it is still not
   confirmed ``ready_timeout_s`` after its creation. P already stops above the pods below
   it, so no second broker goes down; the plan says why for a condition and an Event.

Scaling: a scale-up's new ordinals are >= P (step 6 keeps P at or below them), so the
controller creates them at the update revision; until they are confirmed they hold the
rollout at the top (step 4), which only delays it. Pods at or above ``replicas`` (a
scale-down's leaving brokers, drained first by ``scaling``) are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from popfleet_operator.model import names
from popfleet_operator.model.observations import BrokerInfo, BrokerPod, StatefulSetState

READY_TIMEOUT_S = 600.0


@dataclass(frozen=True, slots=True)
class RolloutPlan:
    """The partition to write, and what the rollout is doing, for status and Events.

    ``passed``: pods the partition moved past this round (confirmed; highest first);
    ``next``: the pod the partition now lets the controller replace ("" when none);
    ``stuck``: why the rollout goes no further ("" when it is not stuck);
    ``updated``: pods ``0 .. replicas-1`` on the update revision;
    ``template_changed``: this round's apply changes the pod template (a rollout starts).
    """

    partition: int
    rolling: bool = False
    message: str = ""
    stuck: str = ""
    passed: tuple[str, ...] = ()
    next: str = ""
    updated: int = 0
    update_revision: str = ""
    template_changed: bool = False


def confirmed(pod: BrokerPod, update_revision: str, health: Mapping[str, str]) -> bool:
    """On the update revision, Ready, staying, and found healthy this round."""
    return (
        bool(update_revision)
        and pod.revision == update_revision
        and pod.ready
        and not pod.terminating
        and health.get(pod.name) == ""
    )


def raise_cap(sts: StatefulSetState, pods: Mapping[int, BrokerPod], replicas: int) -> int:
    """The highest partition that rolls no pod back (step 6); large when nothing limits it."""
    blockers = [
        ordinal
        for ordinal in range(sts.partition, replicas)
        if ordinal >= sts.replicas  # this round's scale-up adds it
        or (pod := pods.get(ordinal)) is None
        or pod.revision != sts.current_revision
    ]
    return min(blockers, default=replicas)


def stuck_reason(
    pod: BrokerPod | None, health: Mapping[str, str], *, now_s: float, ready_timeout_s: float
) -> str:
    """Why the updated pod at the rollout's position is stuck (step 7), "" if it is not."""
    if pod is None:
        return ""
    if pod.problem:
        return f"{pod.name} is not healthy after the update: {pod.problem}"
    if pod.created_s is None or now_s - pod.created_s < ready_timeout_s:
        return ""
    why = health.get(pod.name, "no pod IP yet") or "terminating" if pod.ready else "not Ready"
    age_s = int(now_s - pod.created_s)
    return f"{pod.name} is not healthy after the update: {why} {age_s} s after its creation"


def _held(sts: StatefulSetState) -> RolloutPlan:
    rolling = sts.partition > 0 or sts.current_revision != sts.update_revision
    message = (
        f"rolling: waiting for the StatefulSet controller to observe generation {sts.generation}"
        if rolling
        else ""
    )
    return RolloutPlan(sts.partition, rolling=rolling, message=message)


def plan(
    *,
    cluster: str,
    replicas: int,
    sts: StatefulSetState | None,
    template_changed: bool,
    pods: Sequence[BrokerPod],
    health: Mapping[str, str],
    now_s: float,
    ready_timeout_s: float = READY_TIMEOUT_S,
) -> RolloutPlan:
    """The partition for this round's apply (steps 1-7 above).

    ``health``: pod name -> "" when the operator found the broker reachable, serving and
    holding the pushed member list this round, else why not (no entry: not asked).
    """
    if sts is None or replicas <= 0:
        return RolloutPlan(0)  # step 1
    if not template_changed and not sts.status_current:
        return _held(sts)  # step 2
    update = "" if template_changed else sts.update_revision
    by_ordinal = {p.ordinal: p for p in pods if p.ordinal < replicas}
    updated = sum(1 for p in by_ordinal.values() if update and p.revision == update)
    if not template_changed and sts.current_revision == update and updated == len(by_ordinal):
        return RolloutPlan(0, updated=updated, update_revision=update)  # step 3
    done: list[str] = []
    for ordinal in range(replicas - 1, -1, -1):  # step 4
        pod = by_ordinal.get(ordinal)
        if pod is None or not confirmed(pod, update, health):
            break
        done.append(pod.name)
    if len(done) == replicas:
        return RolloutPlan(0, updated=updated, update_revision=update)  # step 3
    at_ordinal = replicas - 1 - len(done)
    at = by_ordinal.get(at_ordinal)
    name = names.pod(cluster, at_ordinal)
    takes_down = at is not None and at.revision != update and at.ready and not at.terminating
    away = [
        names.pod(cluster, ordinal)
        for ordinal in range(replicas)
        if ordinal != at_ordinal
        and ((p := by_ordinal.get(ordinal)) is None or not p.ready or p.terminating)
    ]
    wanted = at_ordinal + 1 if takes_down and away else at_ordinal  # step 5
    if wanted <= sts.partition:  # step 6
        partition = wanted
    else:
        partition = max(sts.partition, min(wanted, raise_cap(sts, by_ordinal, replicas)))
    passed = tuple(
        names.pod(cluster, ordinal)
        for ordinal in range(min(sts.partition, replicas - 1), partition, -1)
    )
    on_update = at is not None and bool(update) and at.revision == update
    stuck = (
        stuck_reason(at, health, now_s=now_s, ready_timeout_s=ready_timeout_s) if on_update else ""
    )
    progress = f"{len(done)}/{replicas} brokers updated" + (f" ({', '.join(done)})" if done else "")
    if stuck:
        message = f"rollout stuck: {stuck}; the rollout goes no further"
    elif partition > at_ordinal and takes_down and away:
        verb = "is" if len(away) == 1 else "are"
        message = (
            f"rolling: {progress}; {name} is next and waits while {', '.join(away)} {verb} "
            "not Ready (one broker away at a time)"
        )
    else:
        message = f"rolling: {progress}; waiting for {name} to be Ready and re-applied"
    return RolloutPlan(
        partition,
        rolling=True,
        message=message,
        stuck=stuck,
        passed=passed,
        next=name if partition <= at_ordinal and not on_update else "",
        updated=updated,
        update_revision=update,
        template_changed=template_changed,
    )


def broker_health(infos: Sequence[BrokerInfo], member_errors: Mapping[str, str]) -> dict[str, str]:
    """Pod name -> "" when its broker answered, serves and holds the pushed member list
    (the operator re-applied it this round), else why not."""
    health: dict[str, str] = {}
    for info in infos:
        if not info.reachable:
            why = "admin API not answering" + (f" ({info.error})" if info.error else "")
        elif not info.serving:
            why = "not serving (its store is not writable)"
        elif member_errors.get(info.pod.name):
            why = f"member list not applied: {member_errors[info.pod.name]}"
        else:
            why = ""
        health[info.pod.name] = why
    return health
