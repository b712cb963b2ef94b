"""The rolling-update rule: which partition the operator writes, round by round (pure).

Pods ``demo-0 .. demo-2`` on revision A (current); the new template is revision B.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from popfleet_operator.model.observations import BrokerInfo, BrokerPod, StatefulSetState
from popfleet_operator.planning import rollout

NOW_S = 1_800_000_000.0


def pod(
    ordinal: int,
    revision: str,
    *,
    ready: bool = True,
    terminating: bool = False,
    problem: str = "",
    age_s: float = 30.0,
) -> BrokerPod:
    return BrokerPod(
        f"demo-{ordinal}",
        ordinal,
        f"127.0.1.{ordinal + 2}",
        ready=ready,
        terminating=terminating,
        revision=revision,
        created_s=NOW_S - age_s,
        problem=problem,
    )


def sts(
    *,
    partition: int = 0,
    current: str = "A",
    update: str = "B",
    replicas: int = 3,
    stale: bool = False,
) -> StatefulSetState:
    return StatefulSetState(
        replicas=replicas,
        partition=partition,
        generation=7,
        observed_generation=6 if stale else 7,
        current_revision=current,
        update_revision=update,
        template_hash="h",
    )


def healthy(pods: Sequence[BrokerPod]) -> dict[str, str]:
    return {p.name: "" for p in pods if p.ready}


def plan(
    state: StatefulSetState | None,
    pods: Sequence[BrokerPod],
    *,
    replicas: int = 3,
    changed: bool = False,
    health: Mapping[str, str] | None = None,
) -> rollout.RolloutPlan:
    return rollout.plan(
        cluster="demo",
        replicas=replicas,
        sts=state,
        template_changed=changed,
        pods=pods,
        health=healthy(pods) if health is None else health,
        now_s=NOW_S,
        ready_timeout_s=600,
    )


ALL_A = [pod(0, "A"), pod(1, "A"), pod(2, "A")]


def test_creation_and_a_settled_cluster_are_not_gated() -> None:
    assert plan(None, []) == rollout.RolloutPlan(0)
    empty_status = StatefulSetState(3, 0, 1, 0, "", "", "h")
    assert plan(empty_status, []) == rollout.RolloutPlan(0)
    settled = plan(sts(update="A"), ALL_A)
    assert (settled.partition, settled.rolling, settled.message) == (0, False, "")
    one_down = [pod(0, "A", ready=False), pod(1, "A"), pod(2, "A")]
    assert plan(sts(update="A"), one_down).partition == 0  # not a rollout, just a bad pod


def test_a_template_change_lets_only_the_highest_ordinal_go() -> None:
    started = plan(sts(update="A"), ALL_A, changed=True)
    assert started.partition == 2
    assert started.rolling and started.template_changed and started.next == "demo-2"
    assert started.message == (
        "rolling: 0/3 brokers updated; waiting for demo-2 to be Ready and re-applied"
    )


def test_the_partition_moves_one_pod_at_a_time_after_it_is_ready_and_reapplied() -> None:
    # demo-2 replaced, starting: nothing more goes.
    starting = [pod(0, "A"), pod(1, "A"), pod(2, "B", ready=False)]
    assert plan(sts(partition=2), starting).partition == 2
    # Ready but its admin API did not answer this round: still waiting.
    ready = [pod(0, "A"), pod(1, "A"), pod(2, "B")]
    unanswered = {"demo-0": "", "demo-1": "", "demo-2": "admin API not answering"}
    waiting = plan(sts(partition=2), ready, health=unanswered)
    assert (waiting.partition, waiting.passed, waiting.stuck) == (2, (), "")
    # Ready and re-applied: the partition passes demo-2 and demo-1 may go.
    moved = plan(sts(partition=2), ready)
    assert (moved.partition, moved.passed, moved.next) == (1, ("demo-2",), "demo-1")
    assert moved.message == (
        "rolling: 1/3 brokers updated (demo-2); waiting for demo-1 to be Ready and re-applied"
    )
    # demo-1 being replaced: held at 1.
    replacing = [pod(0, "A"), pod(1, "A", ready=False, terminating=True), pod(2, "B")]
    assert plan(sts(partition=1), replacing).partition == 1
    assert plan(sts(partition=1), [pod(0, "A"), pod(2, "B")]).partition == 1
    # demo-1 back and re-applied: demo-0 goes.
    last = plan(sts(partition=1), [pod(0, "A"), pod(1, "B"), pod(2, "B")])
    assert (last.partition, last.passed, last.next) == (0, ("demo-1",), "demo-0")
    # demo-0 replaced but not yet Ready: still rolling at 0.
    final = [pod(0, "B", ready=False), pod(1, "B"), pod(2, "B")]
    assert (plan(sts(partition=0), final).partition, plan(sts(partition=0), final).rolling) == (
        0,
        True,
    )
    # Every pod confirmed: done, even before the controller records currentRevision.
    done = plan(sts(partition=0), [pod(0, "B"), pod(1, "B"), pod(2, "B")])
    assert (done.partition, done.rolling) == (0, False)
    assert not plan(sts(current="B"), [pod(0, "B"), pod(1, "B"), pod(2, "B")]).rolling


def test_a_stale_statefulset_status_keeps_the_partition() -> None:
    held = plan(sts(partition=2, update="A", stale=True), ALL_A)
    assert (held.partition, held.rolling) == (2, True)
    assert "observe generation 7" in held.message
    assert plan(sts(update="A", stale=True), ALL_A) == rollout.RolloutPlan(0)


def test_an_updated_broker_that_cannot_run_stops_the_rollout() -> None:
    broken = [pod(0, "A"), pod(1, "A"), pod(2, "B", ready=False, problem="store: ErrImagePull")]
    stuck = plan(sts(partition=2), broken)
    assert stuck.partition == 2 and stuck.rolling
    assert stuck.stuck == "demo-2 is not healthy after the update: store: ErrImagePull"
    assert stuck.message.startswith("rollout stuck: demo-2 is not healthy after the update")


def test_an_updated_broker_not_confirmed_in_time_is_stuck() -> None:
    young = [pod(0, "A"), pod(1, "A"), pod(2, "B", ready=False, age_s=599)]
    assert plan(sts(partition=2), young).stuck == ""
    old = [pod(0, "A"), pod(1, "A"), pod(2, "B", age_s=601)]
    refused = {"demo-0": "", "demo-1": "", "demo-2": "member list not applied: refused"}
    stuck = plan(sts(partition=2), old, health=refused)
    assert stuck.partition == 2
    assert stuck.stuck == (
        "demo-2 is not healthy after the update: member list not applied: refused "
        "601 s after its creation"
    )


def test_no_second_broker_goes_while_another_is_away() -> None:
    demo0_down = [pod(0, "A", ready=False), pod(1, "A"), pod(2, "B")]
    waits = plan(sts(partition=2), demo0_down)
    assert (waits.partition, waits.passed, waits.next) == (2, (), "")
    assert waits.message == (
        "rolling: 1/3 brokers updated (demo-2); demo-1 is next and waits while demo-0 is not "
        "Ready (one broker away at a time)"
    )
    # At the start, too: the partition stays above every pod.
    assert (
        plan(
            sts(update="A"), [pod(0, "A"), pod(1, "A", ready=False), pod(2, "A")], changed=True
        ).partition
        == 3
    )
    # A pod that is not Ready anyway may be replaced: no broker more goes away.
    both_down = [pod(0, "A", ready=False), pod(1, "A", ready=False), pod(2, "B")]
    assert plan(sts(partition=2), both_down).partition == 1


def test_the_partition_never_rises_over_an_updated_pod() -> None:
    # demo-2 fell ill after demo-1 was updated: raising to 2 would roll demo-1 back to A.
    ill = [pod(0, "A"), pod(1, "B"), pod(2, "B", ready=False)]
    held = plan(sts(partition=1), ill)
    assert held.partition == 1
    # demo-1 not replaced yet: the partition goes back up and keeps it.
    before = [pod(0, "A"), pod(1, "A"), pod(2, "B", ready=False)]
    assert plan(sts(partition=1), before).partition == 2


def test_a_new_template_mid_rollout_does_not_roll_updated_pods_back() -> None:
    # B reached demo-2 and demo-1; the template changes again (C): the apply keeps 1.
    mid = [pod(0, "A"), pod(1, "B"), pod(2, "B")]
    again = plan(sts(partition=1), mid, changed=True)
    assert again.partition == 1 and again.rolling


def test_scale_up_during_a_rollout_creates_new_pods_at_the_update_revision() -> None:
    five = [pod(0, "A"), pod(1, "A"), pod(2, "B")]
    # Scaling 3 -> 5 while demo-2 is confirmed: demo-3 and demo-4 do not exist yet, and the
    # partition must not rise above them (they would start at A, to be replaced later).
    grown = plan(sts(partition=2, replicas=3), five, replicas=5)
    assert grown.partition == 2
    # With the template change in the same apply: new ordinals stay above the partition.
    both = plan(sts(update="A", replicas=3), ALL_A, replicas=5, changed=True)
    assert both.partition == 3
    # New pods up and re-applied on B: the rollout continues below them.
    up = [*five, pod(3, "B"), pod(4, "B")]
    assert plan(sts(partition=2, replicas=5), up, replicas=5).partition == 1


def test_plain_scaling_is_no_rollout() -> None:
    four = [*ALL_A, pod(3, "A", ready=False)]
    assert plan(sts(update="A", current="A", replicas=3), ALL_A, replicas=4) == rollout.RolloutPlan(
        0, updated=3, update_revision="A"
    )
    assert not plan(sts(update="A", replicas=4), four, replicas=4).rolling
    # Scale-down: the leaving pod (ordinal 2, any revision) does not count.
    leaving = [pod(0, "A"), pod(1, "A"), pod(2, "B")]
    assert plan(sts(update="A", current="A"), leaving, replicas=2).partition == 0


def test_health_is_answered_serving_and_members_applied() -> None:
    pods = [pod(i, "A") for i in range(4)]
    infos = [
        BrokerInfo(pods[0], reachable=True, serving=True),
        BrokerInfo(pods[1], reachable=False, error="deadline exceeded"),
        BrokerInfo(pods[2], reachable=True, serving=False),
        BrokerInfo(pods[3], reachable=True, serving=True),
    ]
    assert rollout.broker_health(infos, {"demo-0": "", "demo-3": "UNAVAILABLE"}) == {
        "demo-0": "",
        "demo-1": "admin API not answering (deadline exceeded)",
        "demo-2": "not serving (its store is not writable)",
        "demo-3": "member list not applied: UNAVAILABLE",
    }
