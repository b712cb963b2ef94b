"""A replicated BrokerCluster (``spec.replication``, issue 18) on the testbed with the chart's
operator: real StatefulSet controller (pod-index labels), real RBAC (the brokers' binding to
the chart's replica ClusterRole), real Leases and EndpointSlices.

One set of three replicas (SYNC, two in sync): the stores elect a leader through the
set's Lease and it labels its pod; the set's Service selects that pod alone; the
operator's config reaches the leader; writes answered by the leader are on the followers;
deleting the leader's pod hands the lead over (the Lease released on the way out), the
label, the Service and the operator's writes follow, and every acknowledged message is
consumed from the new leader. The followers dial the address the leader publishes on the
Lease: the testbed has no cluster DNS, so this also proves they need none.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest

from popfleet_operator.model import names
from popfleet_testbed import cluster, errors, waiting
from tests.integration.operator import clientprotocol, story

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("operator_log_clean")]

CLUSTER = "rep"
SET = f"{CLUSTER}-0"
REPLICA_PODS = {f"{CLUSTER}-0", f"{CLUSTER}-r1-0", f"{CLUSTER}-r2-0"}
SENT = 40
T = TypeVar("T")


def lease(tb: cluster.Cluster, ns: str) -> dict[str, Any] | None:
    return tb.admin.get_or_none(f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{SET}")


def holder(tb: cluster.Cluster, ns: str) -> str | None:
    found = lease(tb, ns)
    return None if found is None else found["spec"].get("holderIdentity")


def in_sync(tb: cluster.Cluster, ns: str) -> set[str]:
    found = lease(tb, ns) or {"metadata": {}}
    members = (found["metadata"].get("annotations") or {}).get("popfleet.io/in-sync", "")
    return {m for m in members.split(",") if m}


def pods_by_name(tb: cluster.Cluster, ns: str) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in story.broker_pods(tb, ns, CLUSTER)}


def labelled_leaders(tb: cluster.Cluster, ns: str) -> set[str]:
    return {
        name
        for name, pod in pods_by_name(tb, ns).items()
        if (pod["metadata"].get("labels") or {}).get(names.LABEL_LEADER) == "true"
    }


def selected_by_service(tb: cluster.Cluster, ns: str) -> set[str]:
    """The pods the set's Service selects. (Its EndpointSlices stay empty on the testbed:
    pod IPs here are loopback addresses, which the API refuses in endpoints; the kind step
    checks the real EndpointSlices.)"""
    service = tb.admin.get_or_none(f"/api/v1/namespaces/{ns}/services/{SET}") or {}
    selector = (service.get("spec") or {}).get("selector") or {}
    return {
        name
        for name, pod in pods_by_name(tb, ns).items()
        if selector and selector.items() <= (pod["metadata"].get("labels") or {}).items()
    }


def leader_port_open(pod: dict[str, Any]) -> bool:
    try:
        with socket.create_connection((cluster.Cluster.pod_ip(pod), names.LEADER_PORT), 2):
            return True
    except OSError:
        return False


def settled(tb: cluster.Cluster, ns: str, *, not_: str | None = None) -> str | None:
    """The set's leader once the Lease, the pod label, the Service's selection and the open
    leader port agree (not ``not_``)."""
    lead = holder(tb, ns)
    pods = pods_by_name(tb, ns)
    if lead is None or lead == not_ or lead not in pods:
        return None
    if labelled_leaders(tb, ns) != {lead}:
        return None
    if selected_by_service(tb, ns) != {lead}:
        return None
    # popfront opens the leader port once the store's leader file says it leads (it
    # polls the file every 200 ms after the round that took the lead)
    return lead if leader_port_open(pods[lead]) else None


def describe(tb: cluster.Cluster, ns: str) -> str:
    """What the waits look at, for a timeout's message."""
    found = lease(tb, ns) or {"metadata": {}, "spec": {}}
    pods = {
        name: (
            (pod["metadata"].get("labels") or {}).get(names.LABEL_LEADER),
            cluster.Cluster.pod_ip(pod) if (pod.get("status") or {}).get("podIP") else None,
        )
        for name, pod in pods_by_name(tb, ns).items()
    }
    return (
        f"lease spec {found['spec']} annotations {found['metadata'].get('annotations')}; "
        f"pods (leader label, ip) {pods}; service {SET} selects {selected_by_service(tb, ns)}"
    )


def wait(tb: cluster.Cluster, ns: str, check: Callable[[], T | None], what: str) -> T:
    try:
        return waiting.until(check, timeout_s=120, what=what)
    except errors.Timeout as exc:
        raise errors.Timeout(f"{exc}\n{describe(tb, ns)}") from exc


def test_a_replicated_set_elects_serves_and_hands_over_with_every_ack(
    popfleet_release: cluster.Cluster,
) -> None:
    tb = popfleet_release
    ns = tb.new_namespace("replicated")
    cr = story.brokers_cr(CLUSTER, 1)
    cr["spec"]["replication"] = {"replicas": 3, "mode": "SYNC", "minInSyncReplicas": 2}
    tb.apply(
        ns,
        cr,
        story.topic_cr("orders", CLUSTER),
        story.group_cr("billing", CLUSTER, "orders"),
    )
    try:
        waiting.until(
            lambda: set(pods_by_name(tb, ns)) == REPLICA_PODS,
            timeout_s=90,
            what="three replica pods of set 0",
        )
        first = wait(tb, ns, lambda: settled(tb, ns), "a settled leader")
        wait(tb, ns, lambda: in_sync(tb, ns) == REPLICA_PODS, "all three in sync")
        story.wait_condition(tb, ns, "topics", "orders", "Ready", timeout_s=120)
        story.wait_condition(tb, ns, "consumergroups", "billing", "Ready", timeout_s=120)
        pods = pods_by_name(tb, ns)
        open_ports = [n for n, p in pods.items() if leader_port_open(p)]
        assert open_ports == [first], f"leader port open on {open_ports}; {describe(tb, ns)}"
        # SYNC with two in sync: each answered write is on a follower too.
        leader_endpoint = f"{cluster.Cluster.pod_ip(pods[first])}:{names.LEADER_PORT}"
        clientprotocol.send(leader_endpoint, topic="orders", count=SENT)

        tb.kubectl("delete", "pod", first, "-n", ns, "--wait=false")
        second = wait(tb, ns, lambda: settled(tb, ns, not_=first), "a new settled leader")
        pods = pods_by_name(tb, ns)
        endpoint = f"{cluster.Cluster.pod_ip(pods[second])}:{names.LEADER_PORT}"
        got = clientprotocol.consume(endpoint, group="billing", topic="orders", count=SENT)
        assert got == SENT
        # The operator's writes follow the lead: a new Topic is confirmed by the new leader.
        tb.apply(ns, story.topic_cr("refunds", CLUSTER))
        story.wait_condition(tb, ns, "topics", "refunds", "Ready", timeout_s=120)
        # The deleted pod comes back (its StatefulSet) and catches up as a follower.
        wait(tb, ns, lambda: in_sync(tb, ns) == REPLICA_PODS, "three in sync again")
        assert holder(tb, ns) == second
        # The BrokerCluster's status names the new leader and its term, and Degraded is
        # False once all three are in sync again: the Lease's new in-sync set wakes the
        # cluster (wakeups.lease_changed), well before the 60 s resync would.
        sets = story.wait_condition(
            tb, ns, "brokerclusters", CLUSTER, "Degraded", status="False", timeout_s=30,
            also=lambda obj: [s.get("leader") for s in obj["status"].get("replication", [])]
            == [second],
        )["status"]["replication"]  # fmt: skip
        assert sets[0]["inSyncReplicas"] == 3 and sets[0]["term"] >= 2
        # Fewer replicas: the StatefulSet of the index no longer wanted is scaled to 0 (the
        # operator may not delete StatefulSets), and its pod goes.
        story.patch_spec(tb, ns, "brokerclusters", CLUSTER, {"replication": {"replicas": 2}})
        r2 = f"/apis/apps/v1/namespaces/{ns}/statefulsets/{CLUSTER}-r2"
        wait(tb, ns, lambda: (tb.admin.get_or_none(r2) or {})["spec"]["replicas"] == 0, "r2 at 0")
        wait(tb, ns, lambda: f"{CLUSTER}-r2-0" not in pods_by_name(tb, ns), "its pod leaving")
    finally:
        tb.delete_namespace(ns)


NEW_IMAGE = "ghcr.io/popfleet/broker:0.1.1"  # the testbed maps every broker tag to ours


@dataclass(frozen=True)
class RollSample:
    """One look at the set during its rollout."""

    uids: dict[str, str]  # pod name -> uid, pods that exist and are not terminating
    ready: frozenset[str]
    images: dict[str, str]
    holder: str | None
    term: int
    at_s: float = field(default_factory=time.monotonic)

    @property
    def away(self) -> list[str]:
        return sorted(REPLICA_PODS - self.ready)


def roll_sample(tb: cluster.Cluster, ns: str) -> RollSample:
    pods = [p for p in pods_by_name(tb, ns).values() if not p["metadata"].get("deletionTimestamp")]
    found = lease(tb, ns) or {"metadata": {}, "spec": {}}
    term = (found["metadata"].get("annotations") or {}).get("popfleet.io/term", "0")
    return RollSample(
        uids={p["metadata"]["name"]: p["metadata"]["uid"] for p in pods},
        ready=frozenset(p["metadata"]["name"] for p in pods if tb.is_ready(p)),
        images={p["metadata"]["name"]: p["spec"]["containers"][0]["image"] for p in pods},
        holder=found["spec"].get("holderIdentity"),
        term=int(term),
    )


def test_a_rolling_update_restarts_followers_first_and_hands_over_once(
    popfleet_release: cluster.Cluster,
) -> None:
    """The image changes on a set of three (SYNC, two in sync): each follower restarts and is
    back in sync before the next pod goes; then the leader hands over to an updated follower
    (one new term, no lease time waited) and restarts as a follower. Never two pods away,
    never the leader restarted while it leads, every acknowledged message kept."""
    tb = popfleet_release
    ns = tb.new_namespace("reproll")
    cr = story.brokers_cr(CLUSTER, 1)
    cr["spec"]["replication"] = {"replicas": 3, "mode": "SYNC", "minInSyncReplicas": 2}
    tb.apply(
        ns, cr, story.topic_cr("orders", CLUSTER), story.group_cr("billing", CLUSTER, "orders")
    )
    try:
        waiting.until(lambda: set(pods_by_name(tb, ns)) == REPLICA_PODS, timeout_s=90,
                      what="three replica pods of set 0")  # fmt: skip
        first = wait(tb, ns, lambda: settled(tb, ns), "a settled leader")
        wait(tb, ns, lambda: in_sync(tb, ns) == REPLICA_PODS, "all three in sync")
        story.wait_condition(tb, ns, "consumergroups", "billing", "Ready", timeout_s=120)
        pods = pods_by_name(tb, ns)
        clientprotocol.send(clientprotocol_leader(pods[first]), topic="orders", count=SENT)
        before = wait(tb, ns, lambda: ((s := roll_sample(tb, ns)).away == [] and s) or None,
                      "all three pods Ready")  # fmt: skip
        story.patch_spec(tb, ns, "brokerclusters", CLUSTER, {"image": NEW_IMAGE})
        samples: list[RollSample] = []

        def rolled() -> bool:
            now = roll_sample(tb, ns)
            samples.append(now)
            updated = all(now.images.get(name) == NEW_IMAGE for name in REPLICA_PODS)
            return updated and now.away == [] and in_sync(tb, ns) == REPLICA_PODS

        waiting.until(rolled, timeout_s=240, interval_s=0.1, what="every replica on the new image")
        seen = "\n".join(
            f"holder={s.holder} term={s.term} away={s.away} "
            f"new={sorted(n for n, i in s.images.items() if i == NEW_IMAGE)}"
            for i, s in enumerate(samples)
            if i == 0 or (s.holder, s.term, s.away, s.images) != (
                samples[i - 1].holder, samples[i - 1].term, samples[i - 1].away,
                samples[i - 1].images,
            )
        )  # fmt: skip
        print(seen)
        assert max(len(s.away) for s in samples) <= 1, f"two pods away at once:\n{seen}"

        def replaced(name: str) -> int:
            old = before.uids[name]
            return next(i for i, s in enumerate(samples) if s.uids.get(name, old) != old)

        order = sorted(REPLICA_PODS, key=replaced)
        assert order[-1] == first, f"the leader {first} did not restart last: {order}\n{seen}"
        at = replaced(first)
        assert samples[at - 1].holder not in (None, first), f"restarted leading:\n{seen}"
        successor = samples[at - 1].holder
        last_old = max(i for i, s in enumerate(samples) if s.holder == first)
        new_lead = next(i for i, s in enumerate(samples) if s.holder == successor)
        took_s = samples[at].at_s - samples[0].at_s
        print(f"figures: roll {took_s:.1f}s to the leader's restart; no holder for at most "
              f"{samples[new_lead].at_s - samples[last_old].at_s:.2f}s")  # fmt: skip
        assert successor in order[:2]  # an updated follower took over
        assert samples[-1].term == before.term + 1, f"not one hand-over:\n{seen}"
        story.wait_event(tb, ns, "LeaderHandedOver", f"{first} handed {SET}")
        second = wait(tb, ns, lambda: settled(tb, ns), "a settled leader after the roll")
        assert second == successor
        endpoint = clientprotocol_leader(pods_by_name(tb, ns)[second])
        assert clientprotocol.consume(endpoint, group="billing", topic="orders", count=SENT) == (
            SENT
        )
        story.wait_condition(tb, ns, "brokerclusters", CLUSTER, "Ready", timeout_s=60,
                             also=lambda obj: "rollout" not in obj["status"])  # fmt: skip
    finally:
        tb.delete_namespace(ns)


def clientprotocol_leader(pod: dict[str, Any]) -> str:
    """The leader port of ``pod`` (popfront serves the v2 API there while its store leads)."""
    return f"{cluster.Cluster.pod_ip(pod)}:{names.LEADER_PORT}"
