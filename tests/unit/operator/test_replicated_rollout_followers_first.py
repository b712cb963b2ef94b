"""planning.replicarollout: a replicated cluster rolls set by set, followers first, then
each leader once it has handed over to an updated in-sync follower (issue 18).

The model at the end plays the StatefulSet controller (it replaces, highest ordinal first,
only pods at or above its partition and only while none of its pods is away), pods coming
back Ready and in sync, and the broker's hand-over (the Lease moves to the successor), in
any interleaving; the rollout must finish with every set restarted one replica at a time,
its leader restarted last and after exactly one hand-over, and no leader ever restarted
while it leads."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from popfleet_operator.model.observations import BrokerPod, SetLease, StatefulSetState
from popfleet_operator.planning import replicarollout
from popfleet_operator.planning.replicarollout import HandOver, ReplicaIndex

CLUSTER = "rep"
NOW_S = 10_000.0


def state(*, partition: int, rolled: bool = False, template: str = "new") -> StatefulSetState:
    return StatefulSetState(
        replicas=2, partition=partition, generation=2, observed_generation=2,
        current_revision="new" if rolled else "old", update_revision="new",
        template_hash=template,
    )  # fmt: skip


def pod(replica: int, ordinal: int, *, revision: str = "old", ready: bool = True) -> BrokerPod:
    name = replicarollout.pod_name(CLUSTER, replica, ordinal)
    return BrokerPod(name, ordinal, "10.0.0.1", ready, revision=revision, created_s=NOW_S)


def index(replica: int, *, partition: int, revisions: Mapping[int, str]) -> ReplicaIndex:
    pods = {o: pod(replica, o, revision=rev) for o, rev in revisions.items()}
    return ReplicaIndex(state(partition=partition), template_changed=False, pods=pods)


def lease(ordinal: int, leader: str, *members: str) -> SetLease:
    return SetLease(f"{CLUSTER}-{ordinal}", leader, 1, tuple(sorted(members)))


HEALTHY = {f"{CLUSTER}-0": "", f"{CLUSTER}-1": ""}


def test_a_template_change_starts_with_a_follower_of_the_highest_set() -> None:
    old = {0: "old", 1: "old"}
    indexes = [
        dataclasses.replace(index(r, partition=0, revisions=old), template_changed=True)
        for r in range(3)
    ]
    # set 1's leader is replica 0: its first follower (replica 1) goes first
    leases = {
        "rep-0": lease(0, "rep-0", "rep-0", "rep-r1-0", "rep-r2-0"),
        "rep-1": lease(1, "rep-1", "rep-1", "rep-r1-1", "rep-r2-1"),
    }
    plan = replicarollout.plan(
        cluster=CLUSTER, replicas=2, indexes=indexes, leases=leases, health=HEALTHY, now_s=NOW_S
    )
    assert plan.partitions == (2, 1, 2)
    assert plan.rolling.next == "rep-r1-1" and plan.hand_over is None
    assert plan.rolling.template_changed and plan.rolling.rolling


def test_the_leader_hands_over_once_its_followers_are_back_in_sync() -> None:
    leases = {"rep-1": lease(1, "rep-r1-1", "rep-1", "rep-r1-1", "rep-r2-1")}
    indexes = [
        index(0, partition=1, revisions={0: "old", 1: "new"}),
        index(1, partition=2, revisions={0: "old", 1: "old"}),  # the leader's index
        index(2, partition=1, revisions={0: "old", 1: "new"}),
    ]
    plan = replicarollout.plan(
        cluster=CLUSTER, replicas=2, indexes=indexes, leases=leases, health=HEALTHY, now_s=NOW_S
    )
    assert plan.hand_over == HandOver("rep-1", "rep-r1-1", "rep-1")
    assert plan.partitions == (1, 2, 1)  # the leader is not released
    assert "hands over to rep-1 before it restarts" in plan.rolling.message

    # a follower not back in the in-sync set is no successor: the rollout waits for it
    out = {"rep-1": lease(1, "rep-r1-1", "rep-r1-1", "rep-r2-1")}
    plan = replicarollout.plan(
        cluster=CLUSTER, replicas=2, indexes=indexes, leases=out, health=HEALTHY, now_s=NOW_S
    )
    assert plan.hand_over is None
    assert "waiting for rep-1 to be Ready and back in sync" in plan.rolling.message

    # after the hand-over the old leader is a follower: it is replaced
    moved = {"rep-1": lease(1, "rep-1", "rep-1", "rep-r1-1", "rep-r2-1")}
    plan = replicarollout.plan(
        cluster=CLUSTER, replicas=2, indexes=indexes, leases=moved, health=HEALTHY, now_s=NOW_S
    )
    assert plan.hand_over is None and plan.partitions == (1, 1, 1)
    assert plan.rolling.next == "rep-r1-1"


def test_a_leader_that_cannot_hand_over_is_replaced_leading() -> None:
    leases = {"rep-0": lease(0, "rep-0", "rep-0", "rep-r1-0")}
    indexes = [
        index(0, partition=1, revisions={0: "old"}),
        index(1, partition=0, revisions={0: "new"}),
    ]
    plan = replicarollout.plan(
        cluster=CLUSTER, replicas=1, indexes=indexes, leases=leases, health=HEALTHY,
        now_s=NOW_S, no_hand_over={"rep-0"},
    )  # fmt: skip
    assert plan.hand_over is None and plan.partitions == (0, 0)
    assert "its leader, which cannot hand over" in plan.rolling.message


def test_one_pod_away_at_a_time_and_a_set_without_leader_waits() -> None:
    leases = {"rep-0": lease(0, "rep-0", "rep-0", "rep-r1-0", "rep-r2-0")}
    indexes = [
        index(0, partition=1, revisions={0: "old"}),
        index(1, partition=1, revisions={0: "old"}),
        index(2, partition=1, revisions={0: "old"}),
    ]
    away = dict(indexes[2].pods)
    away[0] = dataclasses.replace(away[0], ready=False)
    with_away = [indexes[0], indexes[1], dataclasses.replace(indexes[2], pods=away)]
    plan = replicarollout.plan(
        cluster=CLUSTER, replicas=1, indexes=with_away, leases=leases, health=HEALTHY,
        now_s=NOW_S,
    )  # fmt: skip
    assert plan.partitions == (1, 1, 0)  # the pod away is the next: replacing it costs nothing
    plan = replicarollout.plan(
        cluster=CLUSTER, replicas=1, indexes=indexes,
        leases={"rep-0": lease(0, "", "rep-0", "rep-r1-0", "rep-r2-0")}, health=HEALTHY,
        now_s=NOW_S,
    )  # fmt: skip
    assert plan.partitions == (1, 1, 1)
    assert "rep-0 has no leader now" in plan.rolling.message


def test_nothing_pending_is_partition_zero_and_a_stale_status_holds() -> None:
    rolled = [
        ReplicaIndex(state(partition=0, rolled=True), False, {0: pod(r, 0, revision="new")})
        for r in range(2)
    ]
    leases = {"rep-0": lease(0, "rep-0", "rep-0", "rep-r1-0")}
    plan = replicarollout.plan(
        cluster=CLUSTER, replicas=1, indexes=rolled, leases=leases, health=HEALTHY, now_s=NOW_S
    )
    assert plan.partitions == (0, 0) and not plan.rolling.rolling
    assert plan.rolling.updated == 1
    unseen = dataclasses.replace(state(partition=1), observed_generation=1)
    stale = dataclasses.replace(rolled[1], state=unseen)
    plan = replicarollout.plan(
        cluster=CLUSTER, replicas=1, indexes=[rolled[0], stale], leases=leases, health=HEALTHY,
        now_s=NOW_S,
    )  # fmt: skip
    assert plan.partitions == (0, 1) and plan.rolling.rolling


def test_an_updated_pod_that_cannot_run_stops_the_rollout() -> None:
    broken = dataclasses.replace(pod(1, 0, revision="new", ready=False), problem="store: Error")
    indexes = [
        index(0, partition=1, revisions={0: "old"}),
        ReplicaIndex(state(partition=0), False, {0: broken}),
    ]
    leases = {"rep-0": lease(0, "rep-0", "rep-0")}
    plan = replicarollout.plan(
        cluster=CLUSTER, replicas=1, indexes=indexes, leases=leases, health=HEALTHY, now_s=NOW_S
    )
    assert plan.rolling.stuck.startswith("rep-r1-0 is not healthy after the update: store: Error")
    assert plan.partitions == (1, 0) and plan.hand_over is None


# ---------------------------------------------------------------- the model


@dataclasses.dataclass
class Model:
    """Pods, StatefulSets and Leases as the controller, kubelet and brokers move them."""

    replicas: int
    indexes: int
    leaders: list[int]  # per set, the replica index of its leader
    partitions: list[int]
    revisions: dict[tuple[int, int], str]
    ready: dict[tuple[int, int], bool]
    in_sync: dict[int, set[int]]
    template_applied: bool = False
    restarted: list[tuple[int, int, bool]] = dataclasses.field(default_factory=list)
    hand_overs: dict[int, int] = dataclasses.field(default_factory=dict)
    waited: dict[tuple[int, int], int] = dataclasses.field(default_factory=dict)

    def observed(self) -> tuple[list[ReplicaIndex], dict[str, SetLease]]:
        indexes = []
        for r in range(self.indexes):
            rolled = all(self.revisions[(r, s)] == "new" for s in range(self.replicas))
            sts = StatefulSetState(
                replicas=self.replicas, partition=self.partitions[r], generation=2,
                observed_generation=2, current_revision="new" if rolled else "old",
                update_revision="new" if self.template_applied else "old",
                template_hash="new" if self.template_applied else "old",
            )  # fmt: skip
            pods = {
                s: pod(r, s, revision=self.revisions[(r, s)], ready=self.ready[(r, s)])
                for s in range(self.replicas)
            }
            indexes.append(ReplicaIndex(sts, not self.template_applied, pods))
        leases = {
            f"{CLUSTER}-{s}": SetLease(
                f"{CLUSTER}-{s}",
                replicarollout.pod_name(CLUSTER, self.leaders[s], s),
                1,
                tuple(sorted(replicarollout.pod_name(CLUSTER, r, s) for r in self.in_sync[s])),
            )
            for s in range(self.replicas)
        }
        return indexes, leases

    def controller(self, r: int) -> None:
        """Index ``r``'s controller replaces its highest pod at or above its partition that
        is not updated, while none of its pods is away."""
        if not all(self.ready[(r, s)] for s in range(self.replicas)):
            return
        for s in range(self.replicas - 1, self.partitions[r] - 1, -1):
            if self.revisions[(r, s)] != "new":
                others = [c for c, ok in self.ready.items() if not ok and c != (r, s)]
                assert not others, f"{(r, s)} replaced while {others} away"
                self.restarted.append((r, s, self.leaders[s] == r))
                self.revisions[(r, s)], self.ready[(r, s)] = "new", False
                self.in_sync[s].discard(r)
                if self.leaders[s] == r:  # restarted leading: its stop releases the Lease
                    self.leaders[s] = min(self.in_sync[s], default=r)
                return

    def comes_back(self, r: int, s: int) -> None:
        self.ready[(r, s)] = True
        self.in_sync[s].add(r)


@settings(max_examples=60, deadline=None)
@given(
    replicas=st.integers(1, 3),
    indexes=st.integers(2, 3),
    data=st.data(),
)
def test_every_rollout_goes_followers_first_with_one_hand_over_per_set(
    replicas: int, indexes: int, data: st.DataObject
) -> None:
    leaders = [data.draw(st.integers(0, indexes - 1)) for _ in range(replicas)]
    cells = [(r, s) for r in range(indexes) for s in range(replicas)]
    model = Model(
        replicas=replicas, indexes=indexes, leaders=leaders, partitions=[0] * indexes,
        revisions=dict.fromkeys(cells, "old"), ready=dict.fromkeys(cells, True),
        in_sync={s: set(range(indexes)) for s in range(replicas)},
    )  # fmt: skip
    initial = list(leaders)
    crashes = 0
    for _ in range(100):  # a rollout of at most 9 pods takes a few steps each
        followers = [(r, s) for (r, s), ok in model.ready.items() if ok and leaders[s] != r]
        if crashes < 2 and followers and data.draw(st.integers(0, 5)) == 0:
            r, s = data.draw(st.sampled_from(followers))  # a follower's pod fails for a while
            model.ready[(r, s)] = False
            model.in_sync[s].discard(r)
            crashes += 1
        seen, leases = model.observed()
        health = {f"{CLUSTER}-{s}": "" if model.ready[(model.leaders[s], s)] else "down"
                  for s in range(replicas)}  # fmt: skip
        plan = replicarollout.plan(
            cluster=CLUSTER, replicas=replicas, indexes=seen, leases=leases, health=health,
            now_s=NOW_S,
        )  # fmt: skip
        model.partitions = list(plan.partitions)
        model.template_applied = True
        if plan.hand_over is not None:
            s = int(plan.hand_over.broker.rsplit("-", 1)[1])
            successor = next(
                r for r in range(indexes)
                if replicarollout.pod_name(CLUSTER, r, s) == plan.hand_over.successor
            )  # fmt: skip
            assert model.revisions[(successor, s)] == "new" and successor in model.in_sync[s]
            model.leaders[s] = successor
            model.hand_overs[s] = model.hand_overs.get(s, 0) + 1
        finished = all(v == "new" for v in model.revisions.values()) and all(model.ready.values())
        if finished and not plan.rolling.rolling:
            break
        # the world moves, in any order: controllers, then pods coming back
        for r in data.draw(st.permutations(range(indexes))):
            model.controller(r)
        away = [cell for cell, ok in model.ready.items() if not ok]
        for r, s in away:  # back now or at the next step: never away forever
            if data.draw(st.booleans()) or model.waited.get((r, s), 0) >= 1:
                model.comes_back(r, s)
                model.waited.pop((r, s), None)
            else:
                model.waited[(r, s)] = model.waited.get((r, s), 0) + 1
    else:
        raise AssertionError(f"the rollout did not finish: {model}")
    assert {(r, s) for r, s, _ in model.restarted} == set(cells)  # every pod once
    assert len(model.restarted) == len(cells)
    assert not any(leading for _, _, leading in model.restarted)  # never while leading
    for s in range(replicas):
        order = [r for r, s2, _ in model.restarted if s2 == s]
        assert order[-1] == initial[s]  # the leader last
        assert model.hand_overs.get(s, 0) == 1  # one planned hand-over per set
    assert model.partitions == [0] * indexes
