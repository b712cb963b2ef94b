"""Properties of the rolling-update rule (hypothesis).

1. On any observation, the partition the rule writes never lowers past a pod that is not
   confirmed, admits at most one pod off the update revision at a time, takes a Ready broker
   down only when every other broker is Ready, and rises only over pods that exist on the
   current revision (never over a missing pod, which may have been updated, or a new
   ordinal), so the StatefulSet controller never rolls a pod back.
2. Against a model of the StatefulSet controller (Parallel pods, RollingUpdate with a
   partition, highest ordinal first, waiting for each replaced pod to be Ready) and any
   interleaving of controller, kubelet and operator steps: at most one broker is away at any
   time, no pod is ever recreated at the old revision after the new one, a revision whose
   pods never become Ready takes down exactly one broker, and a good one ends with every pod
   updated and the partition at 0. The same with scale-ups and scale-downs interleaved.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import example, given, settings
from hypothesis import strategies as st

from popfleet_operator.model.observations import BrokerPod, StatefulSetState
from popfleet_operator.planning import rollout

REVISIONS = ("A", "B", "C")


@st.composite
def observations(
    draw: st.DrawFn,
) -> tuple[int, StatefulSetState, bool, list[BrokerPod], dict[str, str]]:
    replicas = draw(st.integers(1, 5))
    state = StatefulSetState(
        replicas=draw(st.integers(1, 5)),
        partition=draw(st.integers(0, 6)),
        generation=5,
        observed_generation=draw(st.sampled_from([4, 5])),
        current_revision="A",
        update_revision=draw(st.sampled_from(["A", "B"])),
        template_hash="h",
    )
    pods = []
    health = {}
    for ordinal in range(max(replicas, state.replicas) + 1):
        if not draw(st.booleans()):
            continue
        pod = BrokerPod(
            f"demo-{ordinal}",
            ordinal,
            "127.0.1.9",
            ready=draw(st.booleans()),
            terminating=draw(st.booleans()),
            revision=draw(st.sampled_from(REVISIONS)),
        )
        pods.append(pod)
        if draw(st.booleans()):
            health[pod.name] = draw(st.sampled_from(["", "admin API not answering"]))
    return replicas, state, draw(st.booleans()), pods, health


@settings(max_examples=400, deadline=None)
@given(observations())
def test_the_rule_admits_one_confirmed_step_and_never_rolls_back(
    case: tuple[int, StatefulSetState, bool, list[BrokerPod], dict[str, str]],
) -> None:
    replicas, state, changed, pods, health = case
    got = rollout.plan(
        cluster="demo",
        replicas=replicas,
        sts=state,
        template_changed=changed,
        pods=pods,
        health=health,
        now_s=0.0,
    )
    new, old = got.partition, state.partition
    assert new >= 0
    if not changed and not state.status_current:
        assert new == old
        return
    update = "" if changed else state.update_revision
    by_ordinal = {p.ordinal: p for p in pods if p.ordinal < replicas}
    settled = all(p.revision == update for p in by_ordinal.values())
    if not changed and state.current_revision == update and settled:
        assert (new, got.rolling) == (0, False)  # nothing to roll: nothing is gated
        return
    if new < old:
        for ordinal in range(new + 1, replicas):
            pod = by_ordinal.get(ordinal)
            assert pod is not None and rollout.confirmed(pod, update, health), ordinal
        admitted = [
            by_ordinal[o]
            for o in range(new, min(old, replicas))
            if o in by_ordinal and by_ordinal[o].revision != update
        ]
        assert len(admitted) <= 1
        if admitted and admitted[0].ready and not admitted[0].terminating:
            for ordinal in range(replicas):
                if ordinal != admitted[0].ordinal:
                    pod = by_ordinal.get(ordinal)
                    assert pod is not None and pod.ready and not pod.terminating
    if new > old:
        for ordinal in range(old, min(new, replicas)):
            pod = by_ordinal.get(ordinal)
            assert pod is not None and pod.revision == state.current_revision
            assert ordinal < state.replicas


@dataclass
class SimPod:
    revision: str
    phase: str  # "starting", "ready" or "terminating"


@dataclass
class World:
    """A StatefulSet controller, a kubelet and the operator's rule, stepped one at a time.

    ``desired`` is the BrokerCluster's brokers (a scale step changes it); ``replicas`` what
    the operator last applied to the StatefulSet. ``serving`` holds the ordinals whose pod
    has been Ready since it was created or scaled in: a broker is *away* when it is in there
    and not Ready now (a brand-new broker still starting is not away, it never served).
    """

    replicas: int
    bad: bool  # revision B never becomes Ready (its store cannot start)
    desired: int = 0
    partition: int = 0
    current: str = "A"
    update: str = "A"
    template_hash: str = "old"
    pods: dict[int, SimPod] = field(default_factory=dict)
    created: dict[int, list[str]] = field(default_factory=dict)  # revisions, in order
    serving: set[int] = field(default_factory=set)
    worst_away: int = 0

    def __post_init__(self) -> None:
        self.desired = self.replicas
        for ordinal in range(self.replicas):
            self.pods[ordinal] = SimPod("A", "ready")
            self.created[ordinal] = ["A"]
            self.serving.add(ordinal)

    def broker_pods(self) -> list[BrokerPod]:
        return [
            BrokerPod(
                f"demo-{o}",
                o,
                "127.0.1.9",
                ready=p.phase == "ready",
                terminating=p.phase == "terminating",
                revision=p.revision,
                problem="store: CrashLoopBackOff (3 restarts)"
                if self.bad and p.revision == "B" and p.phase == "starting"
                else "",
            )
            for o, p in sorted(self.pods.items())
        ]

    def operator(self, template_hash: str = "new") -> rollout.RolloutPlan:
        changed = template_hash != self.template_hash
        state = StatefulSetState(
            self.replicas, self.partition, 1, 1, self.current, self.update, self.template_hash
        )
        pods = self.broker_pods()
        got = rollout.plan(
            cluster="demo",
            replicas=self.desired,
            sts=state,
            template_changed=changed,
            pods=pods,
            health={p.name: "" for p in pods if p.ready},
            now_s=0.0,
        )
        # The apply writes replicas, partition and (when changed) the template at once.
        self.partition, self.replicas = got.partition, self.desired
        self.serving = {o for o in self.serving if o < self.replicas}
        if changed:
            self.template_hash, self.update = template_hash, "B"
        return got

    def controller(self) -> None:
        for ordinal, pod in self.pods.items():
            if ordinal >= self.replicas:  # condemned by a scale-down
                pod.phase = "terminating"
        for ordinal in range(self.replicas):
            if ordinal not in self.pods:
                revision = self.current if ordinal < self.partition else self.update
                self.pods[ordinal] = SimPod(revision, "starting")
                self.created.setdefault(ordinal, []).append(revision)
        for ordinal in range(self.replicas - 1, self.partition - 1, -1):
            pod = self.pods[ordinal]
            if pod.revision != self.update and pod.phase != "terminating":
                pod.phase = "terminating"
                break
            if pod.phase != "ready":
                break
        members = [self.pods.get(o) for o in range(self.replicas)]
        if all(p is not None and p.revision == self.update and p.phase == "ready" for p in members):
            self.current = self.update

    def kubelet(self, ordinal: int) -> None:
        pod = self.pods.get(ordinal)
        if pod is None:
            return
        if pod.phase == "terminating":
            del self.pods[ordinal]
        elif pod.phase == "starting" and not (self.bad and pod.revision == "B"):
            pod.phase = "ready"
            if ordinal < self.replicas:
                self.serving.add(ordinal)

    def step(self, kind: str, ordinal: int) -> None:
        if kind == "operator":
            self.operator()
        elif kind == "controller":
            self.controller()
        elif kind == "scale":  # the user edits spec.brokers; the next operator round applies it
            self.desired = max(1, min(5, self.desired + (1 if ordinal % 2 == 0 else -1)))
        elif kind == "evict":  # a pod deleted from outside (drain, eviction): recreated later
            if ordinal in self.pods:
                self.pods[ordinal].phase = "terminating"
        else:
            self.kubelet(ordinal % max(self.replicas, max(self.pods, default=0) + 1))
        away = sum(1 for o in self.serving if o not in self.pods or self.pods[o].phase != "ready")
        self.worst_away = max(self.worst_away, away)

    def settle(self) -> None:
        """Every party keeps acting, fairly, long enough for any rollout to end."""
        for _ in range(6 * max(self.desired, self.replicas) + 6):
            self.step("operator", 0)
            self.step("controller", 0)
            for ordinal in range(max(self.pods, default=0) + 1):
                self.step("kubelet", ordinal)

    def never_rolled_back(self) -> bool:
        return all(
            "A" not in revisions[revisions.index("B") :]
            for revisions in self.created.values()
            if "B" in revisions
        )


STEPS = st.lists(
    st.tuples(st.sampled_from(["operator", "controller", "kubelet"]), st.integers(0, 4)),
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 5), st.booleans(), STEPS)
def test_any_interleaving_keeps_one_broker_away_and_finishes(
    replicas: int, bad: bool, steps: list[tuple[str, int]]
) -> None:
    world = World(replicas, bad)
    world.operator("new")  # the round whose apply changes the template
    for kind, ordinal in steps:
        world.step(kind, ordinal)
        assert world.worst_away <= 1
    world.settle()
    assert world.worst_away <= 1
    assert world.never_rolled_back()
    final = world.operator()
    if bad:
        top = replicas - 1
        assert [world.created[o] for o in range(top)] == [["A"]] * top
        assert world.created[top] == ["A", "B"]
        assert final.partition == top and final.stuck.startswith(f"demo-{top} is not healthy")
    else:
        assert {p.revision for p in world.pods.values()} == {"B"}
        assert all(p.phase == "ready" for p in world.pods.values())
        assert (final.partition, final.rolling, world.current) == (0, False, "B")


SCALING_STEPS = st.lists(
    st.tuples(
        st.sampled_from(["operator", "controller", "kubelet", "kubelet", "scale"]),
        st.integers(0, 5),
    ),
    max_size=150,
)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 5), st.booleans(), SCALING_STEPS)
def test_scaling_during_a_rollout_keeps_one_broker_away_and_never_rolls_back(
    replicas: int, bad: bool, steps: list[tuple[str, int]]
) -> None:
    world = World(replicas, bad)
    world.operator("new")
    for kind, ordinal in steps:
        world.step(kind, ordinal)
        assert world.worst_away <= 1
        assert world.never_rolled_back()
    world.settle()
    assert world.worst_away <= 1 and world.never_rolled_back()
    if not bad:
        final = world.operator()
        assert sorted(world.pods) == list(range(world.desired))
        assert {p.revision for p in world.pods.values()} == {"B"}
        assert (final.partition, final.rolling, world.current) == (0, False, "B")


EVICTING_STEPS = st.lists(
    st.tuples(
        st.sampled_from(["operator", "controller", "kubelet", "kubelet", "scale", "evict"]),
        st.integers(0, 5),
    ),
    max_size=150,
)


# demo-2 and demo-1 updated (partition 1), then demo-2 evicted: the rule wants the partition
# back at 2, which would recreate demo-1 at A once it is evicted too.
UPDATED_THEN_EVICTED = [
    *[("controller", 0), ("kubelet", 2), ("controller", 0), ("kubelet", 2), ("operator", 0)],
    *[("controller", 0), ("kubelet", 1), ("controller", 0), ("kubelet", 1)],
    *[("evict", 2), ("operator", 0), ("evict", 1), ("kubelet", 1), ("controller", 0)],
]

# Scaled down to one broker while demo-1 was being updated (its pod at B goes), then up to
# three with every pod gone: raising the partition over the empty ordinal 1 would recreate it
# at A (found by hypothesis).
SCALED_AWAY_AND_BACK = [
    *[("scale", 1), ("operator", 0), ("controller", 0), ("kubelet", 1), ("controller", 0)],
    *[("scale", 1), ("operator", 0), ("controller", 0), ("scale", 0), ("scale", 0)],
]


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 5), EVICTING_STEPS)
@example(3, UPDATED_THEN_EVICTED)
@example(3, SCALED_AWAY_AND_BACK)
def test_evicted_pods_never_come_back_at_the_old_revision(
    replicas: int, steps: list[tuple[str, int]]
) -> None:
    """Pods deleted from outside at any moment (so an updated broker may fall ill and the
    rule wants the partition back up): none is ever recreated at A after being at B, and
    the rollout still ends with every pod on B."""
    world = World(replicas, bad=False)
    world.operator("new")
    for kind, ordinal in steps:
        world.step(kind, ordinal)
        assert world.never_rolled_back(), world.created
    world.settle()
    final = world.operator()
    assert world.never_rolled_back()
    assert {p.revision for p in world.pods.values()} == {"B"}
    assert (final.partition, final.rolling, world.current) == (0, False, "B")
