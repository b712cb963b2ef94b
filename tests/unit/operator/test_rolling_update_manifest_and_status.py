"""Rolling updates around the rule: the StatefulSet manifest, what is read back, the status.

The partition is part of every apply; the StatefulSet carries the hash of the pod template
it was built with (not inside the template, which would make every hash a new revision);
pods and the StatefulSet are parsed into what ``planning.rollout`` reads; conditions say
where the rollout is.
"""

from __future__ import annotations

from typing import Any

from popfleet_operator import builders
from popfleet_operator.builders import statefulsets
from popfleet_operator.model import names, observations, specs
from popfleet_operator.model.observations import BrokerInfo, BrokerPod, StatefulSetState
from popfleet_operator.status import clusters
from popfleet_operator.status import conditions as c


def statefulset(owner: specs.ObjectRef, raw: dict[str, Any], partition: int) -> dict[str, Any]:
    (sts,) = [
        child
        for child in builders.children(
            owner, specs.parse_cluster(raw), replicas=3, partition=partition
        )
        if child["kind"] == "StatefulSet"
    ]
    return sts


def test_the_partition_is_written_with_the_rolling_update_strategy(
    owner: specs.ObjectRef,
) -> None:
    sts = statefulset(owner, {}, partition=2)
    assert sts["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"partition": 2},
    }
    assert statefulset(owner, {}, partition=0)["spec"]["updateStrategy"]["rollingUpdate"] == {
        "partition": 0
    }


def test_the_template_hash_follows_the_template_only(owner: specs.ObjectRef) -> None:
    base = statefulset(owner, {}, partition=0)
    recorded = base["metadata"]["annotations"][names.TEMPLATE_HASH]
    assert recorded == builders.pod_template_hash(owner, specs.parse_cluster({}))
    assert names.TEMPLATE_HASH not in base["spec"]["template"]["metadata"]["annotations"]
    # Replicas and partition are not the template: same hash.
    assert statefulset(owner, {}, partition=2)["metadata"]["annotations"] == {
        names.TEMPLATE_HASH: recorded
    }
    # Image, resources and settings that reach the pods are.
    for change in (
        {"image": "ghcr.io/popfleet/broker:0.2.0"},
        {"resources": {"store": {"requests": {"cpu": "250m"}}}},
        {"pop": {"ckMaxBufferSize": 5}},
    ):
        assert builders.pod_template_hash(owner, specs.parse_cluster(change)) != recorded
    template = base["spec"]["template"]
    reordered = dict(reversed(list(template.items())))
    assert statefulsets.template_hash(reordered) == statefulsets.template_hash(template)


def pod_body(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "demo-2",
            "creationTimestamp": "2026-11-21T10:00:00Z",
            "labels": {names.LABEL_REVISION: "demo-7c9f"},
        },
        "status": {"podIP": "127.0.1.4", **status},
    }


def waiting(name: str, reason: str, restarts: int = 0, message: str = "") -> dict[str, Any]:
    return {
        "name": name,
        "restartCount": restarts,
        "state": {"waiting": {"reason": reason, "message": message}},
    }


def test_a_pod_is_read_with_its_revision_age_and_problem() -> None:
    pod = observations.broker_pod("demo", pod_body())
    assert pod is not None
    assert (pod.revision, pod.created_s, pod.problem) == ("demo-7c9f", 1795255200.0, "")
    starting = pod_body(
        containerStatuses=[
            waiting("store", "ContainerCreating"),
            waiting("popack", "CrashLoopBackOff", restarts=1),
        ]
    )
    assert observations.broker_pod("demo", starting) == BrokerPod(
        "demo-2",
        2,
        "127.0.1.4",
        ready=False,
        revision="demo-7c9f",
        created_s=1795255200.0,
    )
    pulling = pod_body(containerStatuses=[waiting("store", "ErrImagePull", message="not found")])
    assert observations.broker_pod("demo", pulling).problem == "store: ErrImagePull (not found)"  # type: ignore[union-attr]
    looping = pod_body(containerStatuses=[waiting("popack", "CrashLoopBackOff", restarts=3)])
    assert observations.broker_pod("demo", looping).problem == (  # type: ignore[union-attr]
        "popack: CrashLoopBackOff (3 restarts)"
    )


def test_the_statefulset_is_read_with_partition_revisions_and_hash() -> None:
    assert observations.statefulset_state(None) is None
    state = observations.statefulset_state(
        {
            "metadata": {"generation": 4, "annotations": {names.TEMPLATE_HASH: "abc"}},
            "spec": {
                "replicas": 3,
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}},
            },
            "status": {
                "observedGeneration": 4,
                "currentRevision": "demo-1",
                "updateRevision": "demo-2",
            },
        }
    )
    assert state == StatefulSetState(3, 2, 4, 4, "demo-1", "demo-2", "abc")
    assert state.status_current
    fresh = observations.statefulset_state({"metadata": {"generation": 1}, "spec": {"replicas": 3}})
    assert fresh == StatefulSetState(3, 0, 1, 0, "", "", "")
    assert not fresh.status_current


def info(i: int) -> BrokerInfo:
    pod = BrokerPod(f"demo-{i}", i, f"127.0.1.{i + 2}", ready=True)
    return BrokerInfo(pod, reachable=True, config_epoch=f"e{i}", serving=True)


def test_conditions_say_where_the_rollout_is() -> None:
    infos = [info(0), info(1), info(2)]
    message = "rolling: 1/3 brokers updated (demo-2); waiting for demo-1 to be Ready"
    ready, reconciling, degraded = clusters.cluster_conditions(
        infos, desired=3, replicas=3, rollout=message
    )
    assert (ready.status, ready.reason) == (False, c.ROLLING_UPDATE)
    assert (reconciling.status, reconciling.reason, reconciling.message) == (
        True,
        c.ROLLING_UPDATE,
        message,
    )
    assert degraded.status is False
    stuck = "demo-2 is not healthy after the update: store: ErrImagePull"
    *_, degraded = clusters.cluster_conditions(
        infos, desired=3, replicas=3, rollout="rollout stuck: ...", stuck=stuck
    )
    assert (degraded.status, degraded.reason, degraded.message) == (True, c.ROLLOUT_STUCK, stuck)


def test_a_pod_being_replaced_is_not_reported_unreachable() -> None:
    leaving = BrokerPod("demo-2", 2, "127.0.1.4", ready=True, terminating=True)
    infos = [info(0), info(1), BrokerInfo(leaving, reachable=False)]
    *_, degraded = clusters.cluster_conditions(infos, desired=3, replicas=3, rollout="rolling")
    assert degraded.status is False


def test_a_replaced_pod_changes_the_pods_fingerprint() -> None:
    old = BrokerPod("demo-0", 0, "127.0.1.2", ready=True, revision="demo-a")
    new = BrokerPod("demo-0", 0, "127.0.1.2", ready=True, revision="demo-b")
    assert clusters.pods_fingerprint([old]) != clusters.pods_fingerprint([new])
