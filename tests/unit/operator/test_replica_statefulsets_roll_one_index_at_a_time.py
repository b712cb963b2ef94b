"""planning.replicarollout: a replicated cluster's replica StatefulSets roll one replica
index at a time, after NAME, so no set has two replicas away at once."""

from __future__ import annotations

import dataclasses

from popfleet_operator.model.observations import StatefulSetState
from popfleet_operator.planning import replicarollout

REPLICAS = 3


def sts(*, template: str = "new", rolled: bool = True, ready: int = REPLICAS) -> StatefulSetState:
    return StatefulSetState(
        replicas=REPLICAS, partition=0, generation=2, observed_generation=2,
        current_revision="r2" if rolled else "r1", update_revision="r2", template_hash=template,
        updated_replicas=REPLICAS if rolled else 1, ready_replicas=ready,
    )  # fmt: skip


def partitions(first_settled: bool, *states: StatefulSetState | None) -> list[int]:
    return replicarollout.partitions(
        replicas=REPLICAS,
        first_settled=first_settled,
        states=states,
        built_hashes=["new"] * len(states),
    )


def test_creation_is_never_held() -> None:
    assert partitions(False, None, None) == [0, 0]


def test_a_template_change_rolls_name_first_then_r1_then_r2() -> None:
    # this round's apply changes every template: both replica StatefulSets wait for NAME
    assert partitions(False, sts(template="old"), sts(template="old")) == [REPLICAS, REPLICAS]
    # NAME done: r1 rolls (the controller takes its pods one by one); r2 still waits
    assert partitions(True, sts(rolled=False), sts(template="old")) == [0, REPLICAS]
    # r1 rolled but a pod not Ready yet: r2 waits
    assert partitions(True, sts(ready=2), sts(template="old")) == [0, REPLICAS]
    # r1 settled: r2 rolls
    assert partitions(True, sts(), sts(rolled=False)) == [0, 0]


def test_a_stale_status_is_not_settled() -> None:
    stale = dataclasses.replace(sts(), observed_generation=1)
    assert not replicarollout.settled(stale, built_hash="new", replicas=REPLICAS)
    assert replicarollout.settled(sts(), built_hash="new", replicas=REPLICAS)
    assert not replicarollout.settled(sts(), built_hash="newer", replicas=REPLICAS)
    assert not replicarollout.settled(None, built_hash="new", replicas=REPLICAS)
    assert partitions(True, stale, sts(rolled=False)) == [0, REPLICAS]
