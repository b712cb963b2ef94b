"""A replicated broker set on a real cluster (issue 18): it loses its leader's pod under the
official client's traffic and no acknowledged message is lost.

Beside the story's cluster, a second BrokerCluster ``rep`` of one set of three replicas
(SYNC, two in sync) gets its own Topic and POP group. Then, under a producer and two
PushConsumers (the official Python client, through the proxy pod like everything else):

1. the set's leader (the Lease's holder, its pod labelled leader) is deleted;
2. another replica takes the Lease, its pod takes the label, the set's Service moves
   to it, and the producer's acknowledged sends resume (the client keeps its route,
   ``rep-0.<ns>.svc:8081``, which now reaches the new leader);
3. the producer stops; every acknowledged send is consumed (duplicates allowed);
4. the deleted pod comes back and all three are in sync again.

Then the same under two more disruptions: the leader's store process SIGKILLed (no
graceful hand-over; the kubelet restarts the container), and the leader's pod deleted
with its claim (a lost disk: it comes back empty and catches up as a follower).

Each summary gives the time from the disruption to the first acknowledged send after it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import yaml

from popfleet_e2e import brokers, conditions, disruptions, steps, waits
from popfleet_e2e.access import ClusterAccess, Obj, ScenarioError
from popfleet_e2e.steps import Story
from popfleet_e2e.traffic import Traffic

CLUSTER = "rep"
SET = f"{CLUSTER}-0"
TOPIC = "rep-orders"
GROUP = "rep-billing"
REPLICAS = 3
PODS = {f"{CLUSTER}-0", f"{CLUSTER}-r1-0", f"{CLUSTER}-r2-0"}
LEADER_LABEL = "popfleet.io/leader"
AFTER_FAILOVER = 50  # acknowledged sends after the new leader serves


def manifests() -> list[Obj]:
    ref = {"clusterRef": {"name": CLUSTER}}
    return [
        {
            "apiVersion": "popfleet.io/v1alpha1",
            "kind": "BrokerCluster",
            "metadata": {"name": CLUSTER},
            "spec": {
                "brokers": 1,
                "storage": {"size": "256Mi"},
                "replication": {"replicas": REPLICAS, "mode": "SYNC", "minInSyncReplicas": 2},
            },
        },
        {
            "apiVersion": "popfleet.io/v1alpha1",
            "kind": "Topic",
            "metadata": {"name": TOPIC},
            "spec": {**ref, "queues": 4},
        },
        {
            "apiVersion": "popfleet.io/v1alpha1",
            "kind": "ConsumerGroup",
            "metadata": {"name": GROUP},
            "spec": {**ref, "topics": [{"name": TOPIC}], "consumeMode": "POP"},
        },
    ]


def _lease(access: ClusterAccess) -> Obj:
    return access.get_or_none("lease", SET) or {"metadata": {}, "spec": {}}


def _holder(access: ClusterAccess) -> str | None:
    holder = _lease(access)["spec"].get("holderIdentity")
    return str(holder) if holder else None


def _in_sync(access: ClusterAccess) -> set[str]:
    annotations = _lease(access)["metadata"].get("annotations") or {}
    return {m for m in annotations.get("popfleet.io/in-sync", "").split(",") if m}


def _pods(access: ClusterAccess) -> dict[str, Obj]:
    listed = access.items("pods", selector=f"popfleet.io/cluster={CLUSTER}")
    return {p["metadata"]["name"]: p for p in listed if not p["metadata"].get("deletionTimestamp")}


def _settled(access: ClusterAccess, *, not_: str | None = None) -> str | None:
    """The leader once the Lease, the pod label and the Service's endpoints agree."""
    lead, pods = _holder(access), _pods(access)
    if lead is None or lead == not_ or lead not in pods:
        return None
    labelled = {n for n, p in pods.items() if p["metadata"]["labels"].get(LEADER_LABEL) == "true"}
    if labelled != {lead}:
        return None
    slices = access.items("endpointslices", selector=f"kubernetes.io/service-name={SET}")
    addresses = {
        a for s in slices for e in s.get("endpoints") or [] for a in e.get("addresses") or []
    }
    return lead if addresses == {pods[lead]["status"].get("podIP")} else None


def describe(access: ClusterAccess) -> str:
    pods = {n: p["metadata"]["labels"].get(LEADER_LABEL) for n, p in _pods(access).items()}
    return f"lease holder {_holder(access)}, in sync {sorted(_in_sync(access))}, pods {pods}"


def created(story: Story) -> str:
    """``kubectl apply`` the replicated cluster, its Topic and POP group; a settled leader,
    all three replicas in sync, the Topic synced and the mode applied (on the leader)."""
    access = story.access
    access.kubectl(
        "apply", "-n", access.namespace, "-f", "-", stdin=yaml.safe_dump_all(manifests())
    )
    waits.until(
        lambda: set(_pods(access)) == PODS, timeout_s=180, what=f"pods {sorted(PODS)}",
        seen=lambda: str(sorted(_pods(access))),
    )  # fmt: skip
    leader = waits.until(
        lambda: _settled(access), timeout_s=240, what="a settled leader",
        seen=lambda: describe(access),
    )  # fmt: skip
    waits.until(
        lambda: _in_sync(access) == PODS, timeout_s=180, what="all three replicas in sync",
        seen=lambda: describe(access),
    )  # fmt: skip
    conditions.wait(access, "topic", TOPIC, "TopicSynced", timeout_s=120)
    conditions.wait(access, "consumergroup", GROUP, "ModeApplied", timeout_s=120)
    return f"{leader} leads {SET}; in sync {sorted(_in_sync(access))}"


def _survives(
    story: Story,
    disrupt: Callable[[ClusterAccess, str], str],
    *,
    new_leader: bool,
    max_s: float = 600.0,
) -> str:
    """Traffic on the set; ``disrupt(access, leader)`` (says what it did); then a settled
    leader (another one when ``new_leader``), acknowledged sends again, every acknowledged
    send consumed, and all three replicas back in sync."""
    access = story.access
    endpoints = brokers.bootstrap(access, [], cluster=CLUSTER)
    traffic = Traffic(
        endpoints=endpoints, topic=TOPIC, group=GROUP, hung=False, max_s=max_s,
        max_messages=int(max_s * 10),
    )  # fmt: skip
    traffic.start()
    tally = traffic.tally
    try:
        waits.until(
            lambda: len(tally.consumed) >= 20, timeout_s=120, what="20 consumed from the set",
            seen=tally.describe,
        )  # fmt: skip
        first = _holder(access)
        if first is None:
            raise ScenarioError(f"no leader before the disruption: {describe(access)}")
        before = len(tally.acked)
        story.logbook.collect_brokers(access, sorted(_pods(access)))  # logs go with pods
        started = time.monotonic()
        did = disrupt(access, first)
        resumed: list[float] = []

        def sending_again() -> bool:
            if len(tally.acked) > before + 1 and not resumed:
                resumed.append(time.monotonic() - started)
            return len(tally.acked) >= before + AFTER_FAILOVER

        second = waits.until(
            lambda: _settled(access, not_=first if new_leader else None), timeout_s=180,
            what="a new settled leader" if new_leader else "a settled leader",
            seen=lambda: describe(access),
        )  # fmt: skip
        waits.until(
            sending_again, timeout_s=180, what=f"{AFTER_FAILOVER} acknowledged sends after",
            seen=tally.describe,
        )  # fmt: skip
        steps.drained(traffic, timeout_s=180)
        waits.until(
            lambda: _in_sync(access) == PODS and set(_pods(access)) == PODS, timeout_s=240,
            what="all three replicas back and in sync", seen=lambda: describe(access),
        )  # fmt: skip
    finally:
        traffic.stop()
    gap = f"{resumed[0]:.1f}s" if resumed else "n/a"
    return (
        f"{did}; {second} leads; sends acknowledged again {gap} after; "
        f"all {len(tally.acked)} acknowledged consumed ({tally.describe()})"
    )


def _delete_pod(access: ClusterAccess, leader: str) -> str:
    access.kubectl("delete", "pod", leader, "-n", access.namespace, "--wait=false")
    return f"{leader} (leader) pod deleted"


def _kill_store(access: ClusterAccess, leader: str) -> str:
    pid = disruptions.container_pid(access, leader, "store")  # raises without node_exec
    if access.node_exec is not None:
        access.node_exec(["kill", "-KILL", str(pid)])
    return f"{leader} (leader) store process SIGKILLed"


def _delete_pod_and_claim(access: ClusterAccess, leader: str) -> str:
    """The leader's disk lost: its claim deleted (held by the pod's protection until the
    pod goes), then the pod; it comes back empty and must catch up as a follower."""
    claim = f"data-{leader}"
    access.kubectl("delete", "pvc", claim, "-n", access.namespace, "--wait=false")
    access.kubectl("delete", "pod", leader, "-n", access.namespace, "--wait=false")
    return f"{leader} (leader) pod and its claim {claim} deleted"


def leader_lost_under_traffic(story: Story) -> str:
    """Delete the leader's pod mid-traffic: another replica leads, nothing acknowledged
    is lost."""
    return _survives(story, _delete_pod, new_leader=True)


def leader_store_killed_under_traffic(story: Story) -> str:
    """SIGKILL the leader's store process mid-traffic (no graceful hand-over): a leader
    again (the restarted one may lead on), nothing acknowledged is lost."""
    return _survives(story, _kill_store, new_leader=False)


def leader_disk_lost_under_traffic(story: Story) -> str:
    """Delete the leader's pod and claim mid-traffic; it rejoins empty and catches up;
    nothing acknowledged is lost. Then the replicated cluster goes (its logs kept for the
    log check; its Leases go with it, which the uninstall step checks)."""
    access = story.access
    summary = _survives(story, _delete_pod_and_claim, new_leader=True)
    story.logbook.collect_brokers(access, sorted(_pods(access)))
    access.kubectl("delete", "brokercluster", CLUSTER, "-n", access.namespace, timeout_s=180)
    return summary
