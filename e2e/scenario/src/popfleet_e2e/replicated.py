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

Then the same under three more disruptions: the leader's store process SIGKILLed (no
graceful hand-over; the kubelet restarts the container); the leader isolated by
NetworkPolicy from the API server and from its followers while clients still reach it (a
partition: it must fence itself by its renew deadline, another replica leads, and once the
policies go it follows the new leader); and the leader's pod deleted with its claim (a
lost disk: it comes back empty and catches up as a follower).

Throughout each, a watch on the set's Lease records every (term, holder) it is written
with (:class:`LeaseHistory`): a term with two holders, or a term going back, fails the step.
Each summary gives the time from the disruption to the first acknowledged send after it.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Sequence

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
TERM_ANNOTATION = "popfleet.io/term"
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
ISOLATE = "rep-isolate-leader"  # the leader's egress: nothing (no API server, no follower)
CUT_OFF = "rep-cut-off-leader"  # the followers' egress: anything but the leader
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


def leader(access: ClusterAccess) -> str | None:
    """The pod that holds the set's Lease (its leader), if any."""
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
    lead, pods = leader(access), _pods(access)
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


def lease_problems(seen: Sequence[tuple[int, str | None]]) -> list[str]:
    """What in a Lease's history of (term, holder) breaks one holder per term: a term with
    two holders, or a term lower than one seen before (a cleared holder is a hand-over)."""
    found: list[str] = []
    holders: dict[int, str] = {}
    highest = 0
    for term, holder in seen:
        if term < highest:
            found.append(f"term {term} written after term {highest}")
        highest = max(highest, term)
        if holder is not None and holders.setdefault(term, holder) != holder:
            found.append(f"term {term} held by {holders[term]} and by {holder}")
    return found


class LeaseHistory:
    """Every version of the set's Lease, from a ``kubectl get --watch`` (not sampled): the
    term annotation and holder each write left. The broker's promise is one holder per term
    (a takeover writes the next term, a hand-over clears the holder and keeps the term)."""

    TEMPLATE = 'jsonpath={.metadata.annotations.popfleet\\.io/term} {.spec.holderIdentity}{"\\n"}'

    def __init__(self, access: ClusterAccess) -> None:
        self._watch = access.kubectl_stream(
            "get", "lease", SET, "-n", access.namespace, "--watch", "-o", self.TEMPLATE
        )
        self.seen: list[tuple[int, str | None]] = []
        self._thread = threading.Thread(target=self._read, name="lease-history", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._watch.stdout is not None
        for line in self._watch.stdout:
            term, _, holder = line.strip().partition(" ")
            if term.isdigit():
                self.seen.append((int(term), holder or None))

    def stop(self) -> None:
        self._watch.terminate()
        try:
            self._watch.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._watch.kill()
            self._watch.wait(timeout=10)
        self._thread.join(timeout=10)

    def problems(self) -> list[str]:
        return lease_problems(self.seen)

    def terms(self) -> str:
        held = {t: h for t, h in self.seen if h is not None}
        return ", ".join(f"{t}: {h}" for t, h in sorted(held.items())) or "none"


def describe(access: ClusterAccess) -> str:
    pods = {n: p["metadata"]["labels"].get(LEADER_LABEL) for n, p in _pods(access).items()}
    return f"lease holder {leader(access)}, in sync {sorted(_in_sync(access))}, pods {pods}"


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
    heal: Callable[[ClusterAccess], None] | None = None,
    max_s: float = 600.0,
) -> str:
    """Traffic on the set; ``disrupt(access, leader)`` (says what it did); then a settled
    leader (another one when ``new_leader``), acknowledged sends again, every acknowledged
    send consumed, ``heal`` (if any), and all three replicas back in sync; one holder per
    term on the Lease throughout."""
    access = story.access
    endpoints = brokers.bootstrap(access, [], cluster=CLUSTER)
    traffic = Traffic(
        endpoints=endpoints, topic=TOPIC, group=GROUP, hung=False, max_s=max_s,
        max_messages=int(max_s * 10),
    )  # fmt: skip
    traffic.start()
    tally = traffic.tally
    history = LeaseHistory(access)
    healed = heal is None
    try:
        waits.until(
            lambda: len(tally.consumed) >= 20, timeout_s=120, what="20 consumed from the set",
            seen=tally.describe,
        )  # fmt: skip
        first = leader(access)
        if first is None:
            raise ScenarioError(f"no leader before the disruption: {describe(access)}")
        before = len(tally.acked)
        story.logbook.collect_brokers(access, sorted(_pods(access)))  # logs go with pods
        started = time.monotonic()
        did = disrupt(access, first)
        second = waits.until(
            lambda: _settled(access, not_=first if new_leader else None), timeout_s=180,
            what="a new settled leader" if new_leader else "a settled leader",
            seen=lambda: describe(access),
        )  # fmt: skip
        settled_s = time.monotonic() - started
        waits.until(
            lambda: len(tally.acked) >= before + AFTER_FAILOVER, timeout_s=180,
            what=f"{AFTER_FAILOVER} acknowledged sends after", seen=tally.describe,
        )  # fmt: skip
        steps.drained(traffic, timeout_s=180)
        if heal is not None:
            heal(access)
            healed = True
        waits.until(
            lambda: _in_sync(access) == PODS and set(_pods(access)) == PODS, timeout_s=240,
            what="all three replicas back and in sync", seen=lambda: describe(access),
        )  # fmt: skip
    finally:
        if not healed and heal is not None:
            heal(access)
        traffic.stop()
        history.stop()
    if problems := history.problems():
        raise ScenarioError(f"the Lease's history breaks one holder per term: {problems}")
    pause = tally.longest_pause(started)
    gap = f"{pause[0]:.1f}s without an acknowledged send, over {pause[1]:.1f}s" if pause else "n/a"
    return (
        f"{did}; {second} leads (Lease, label and Service agreed by {settled_s:.1f}s); "
        f"{gap} after the disruption; "
        f"all {len(tally.acked)} acknowledged consumed ({tally.describe()}); "
        f"Lease terms {history.terms()}"
        + (
            f"; consumers started again: {traffic.startup_failures}"
            if traffic.startup_failures
            else ""
        )
    )


def _delete_pod(access: ClusterAccess, leader: str) -> str:
    access.kubectl("delete", "pod", leader, "-n", access.namespace, "--wait=false")
    return f"{leader} (leader) pod deleted"


def _kill_store(access: ClusterAccess, leader: str) -> str:
    pid = disruptions.container_pid(access, leader, "store")  # raises without node_exec
    if access.node_exec is not None:
        access.node_exec(["kill", "-KILL", str(pid)])
    return f"{leader} (leader) store process SIGKILLed"


def isolation_policies(leader: str, followers: list[str], leader_ip: str) -> list[Obj]:
    """The partition: the leader may send nothing (its Lease renewals, its answers to
    followers), the followers anything but to the leader. Ingress stays as the cluster's
    own policy has it, so clients still reach the isolated leader."""
    return [
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": ISOLATE},
            "spec": {
                "podSelector": {"matchLabels": {POD_NAME_LABEL: leader}},
                "policyTypes": ["Egress"],
                "egress": [],
            },
        },
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": CUT_OFF},
            "spec": {
                "podSelector": {
                    "matchExpressions": [
                        {"key": POD_NAME_LABEL, "operator": "In", "values": sorted(followers)}
                    ]
                },
                "policyTypes": ["Egress"],
                "egress": [
                    {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": [f"{leader_ip}/32"]}}]}
                ],
            },
        },
    ]


# Policies are enforced on new flows: the flows the leader already has (its API server
# connection, its followers' replication streams) would pass as established. So its
# conntrack entries are dropped on the node a few times while the policy engine programs the
# rules (a few seconds), after which every packet of those flows meets the policies.
FLUSH_FLOWS = "for f in -s -d -r; do conntrack -D $f {ip} >/dev/null 2>&1; done; true"
FLUSHES, FLUSH_EVERY_S = 6, 1.0


def _isolate(access: ClusterAccess, leader: str) -> str:
    if access.node_exec is None:
        raise ScenarioError("this cluster gives no way to run a command on its node")
    pods = _pods(access)
    ip = str(pods[leader]["status"]["podIP"])
    followers = sorted(set(pods) - {leader})
    access.kubectl(
        "apply", "-n", access.namespace, "-f", "-",
        stdin=yaml.safe_dump_all(isolation_policies(leader, followers, ip)),
    )  # fmt: skip
    for _ in range(FLUSHES):
        access.node_exec(["sh", "-c", FLUSH_FLOWS.format(ip=ip)])
        time.sleep(FLUSH_EVERY_S)  # bounded: the policy engine's programming, not a wait
    return f"{leader} (leader, {ip}) isolated from the API server and {followers}"


def _rejoin(access: ClusterAccess) -> None:
    access.kubectl(
        "delete", "networkpolicy", ISOLATE, CUT_OFF, "-n", access.namespace, "--ignore-not-found"
    )


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


def leader_isolated_under_traffic(story: Story) -> str:
    """Cut the leader off from the API server and its followers by NetworkPolicy
    mid-traffic: it fences itself, another replica leads, nothing acknowledged is lost; the
    policies go and the old leader follows the new one."""
    return _survives(story, _isolate, new_leader=True, heal=_rejoin)


def leader_disk_lost_under_traffic(story: Story) -> str:
    """Delete the leader's pod and claim mid-traffic; it rejoins empty and catches up;
    nothing acknowledged is lost. Then the replicated cluster goes (its logs kept for the
    log check; its Leases go with it, which the uninstall step checks)."""
    access = story.access
    summary = _survives(story, _delete_pod_and_claim, new_leader=True)
    story.logbook.collect_brokers(access, sorted(_pods(access)))
    access.kubectl("delete", "brokercluster", CLUSTER, "-n", access.namespace, timeout_s=180)
    return summary
