"""The story's steps on the cluster, each a function of the ``Story`` returning a summary line.

DESIGN §1 in order: a BrokerCluster of 3 brokers from ``crds/examples`` → its Topic and
ConsumerGroup (PULL) → traffic with the official client, one PushConsumer hung → the hung
consumer stalls its PULL queues → ``kubectl patch`` the group to POP → ``ModeApplied`` on every
broker (read back from each) → the stalled backlog drains → ``kubectl get cg`` columns → a
broker pod deleted mid-traffic comes back with its modes → no acknowledged message lost.
Chart install, upgrade and uninstall are in ``lifecycle``, the audit in ``auditing``, the log
check in ``logs``.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

import yaml

from popfleet_e2e import auditing, brokers, conditions, logs, waits
from popfleet_e2e.access import ClusterAccess, Obj, ScenarioError
from popfleet_e2e.traffic import Traffic

CLUSTER = "demo"  # names in crds/examples
TOPIC = "orders"
GROUP = "billing"
REPLICAS = 3
POP_PATCH: Obj = {"spec": {"consumeMode": "POP", "popShareQueueNum": 1}}
STALL_MIN_MESSAGES = 20  # backlog that shows the hung consumer's PULL queues stand still


@dataclass
class Story:
    access: ClusterAccess
    traffic: Traffic | None = None
    stalled: dict[tuple[str, int], int] = field(default_factory=dict)
    logbook: logs.LogBook = field(default_factory=logs.LogBook)
    traffic_max_s: float = 1_800.0  # the producer's own bound (make demo runs longer)
    cluster_spec: Obj = field(default_factory=dict)  # set over the example BrokerCluster's spec
    audit_pods: auditing.PodTally | None = None  # kind: the audit pods seen while runs go
    elastic: object | None = None  # kind, KEDA: the elastic step's producer and sampler
    # time.monotonic() of moments later steps measure from ("traffic": the hung consumer's
    # first messages; "pop": the patch to POP)
    marks: dict[str, float] = field(default_factory=dict)

    def running_traffic(self) -> Traffic:
        if self.traffic is None:
            raise ScenarioError("no traffic: run the start_traffic step first")
        return self.traffic


def ensure_namespace(access: ClusterAccess) -> None:
    if access.get_or_none("namespace", access.namespace) is None:
        access.kubectl("create", "namespace", access.namespace)


def members_everywhere(access: ClusterAccess, listed: list[brokers.Broker]) -> bool:
    want = sorted((b.name, b.endpoint) for b in listed)
    for broker in listed:
        members = brokers.call(access, broker, lambda admin: admin.members())
        if sorted((m.broker_name, m.endpoint) for m in members) != want:
            return False
    return True


def ready_with(obj: Obj, replicas: int) -> bool:
    status = obj.get("status") or {}
    return status.get("readyBrokers") == replicas and len(brokers.listed(obj)) == replicas


def create_cluster(story: Story) -> str:
    """``kubectl apply`` the example BrokerCluster (with ``story.cluster_spec`` set over its
    spec); 3 brokers Ready, each knowing all 3."""
    access = story.access
    ensure_namespace(access)
    manifest = yaml.safe_load((access.examples / "brokercluster.yaml").read_text())
    manifest["spec"].update(story.cluster_spec)
    access.kubectl("apply", "-n", access.namespace, "-f", "-", stdin=yaml.safe_dump(manifest))
    bc = conditions.wait(
        access, "brokercluster", CLUSTER, "Ready", timeout_s=240,
        also=lambda obj: ready_with(obj, REPLICAS), what=f"{REPLICAS} brokers ready",
    )  # fmt: skip
    listed = brokers.listed(bc)
    waits.until(
        lambda: members_everywhere(access, listed), timeout_s=60,
        what="every broker lists all members",
    )  # fmt: skip
    return ", ".join(f"{b.name}@{b.endpoint}" for b in listed)


def wait_modes(
    access: ClusterAccess, mode: str, share: int, *, timeout_s: float, what: str
) -> None:
    """Until every one of the ``REPLICAS`` brokers reads ``GROUP`` back as ``mode``/``share`` on
    ``TOPIC`` alone; a timeout quotes what each broker read back last."""
    last: dict[str, list[tuple[str, str, int]]] = {}

    def everywhere() -> bool:
        listed = brokers.current(access, CLUSTER)
        last.clear()
        for b in listed:
            last[b.name] = brokers.modes(access, b, GROUP)
        return len(listed) == REPLICAS and all(m == [(TOPIC, mode, share)] for m in last.values())

    waits.until(everywhere, timeout_s=timeout_s, what=what, seen=lambda: f"read back {last}")


def apply_topics_and_groups(story: Story) -> str:
    """``kubectl apply`` the example Topic and ConsumerGroup; both synced on every broker."""
    access = story.access
    access.apply_files([access.examples / "topic.yaml", access.examples / "consumergroup.yaml"])
    topic = conditions.wait(access, "topic", TOPIC, "TopicSynced", timeout_s=90)
    conditions.wait(access, "consumergroup", GROUP, "ModeApplied", timeout_s=90)
    wait_modes(access, "PULL", 0, timeout_s=30, what=f"{GROUP} PULL on every broker")
    for broker in brokers.current(access, CLUSTER):
        names = [t.name for t in brokers.call(access, broker, lambda admin: admin.topics())]
        if TOPIC not in names:
            raise ScenarioError(f"{broker.name} has no topic {TOPIC}: {names}")
    return f"topic {TOPIC} synced {topic['status'].get('syncedBrokers')}, group {GROUP} PULL"


def start_traffic(story: Story) -> str:
    """A producer, two healthy PushConsumers and one hung PushConsumer on the group."""
    access = story.access
    endpoints = brokers.bootstrap(access, brokers.current(access, CLUSTER), cluster=CLUSTER)
    story.traffic = Traffic(
        endpoints=endpoints, topic=TOPIC, group=GROUP, max_s=story.traffic_max_s,
        max_messages=int(story.traffic_max_s * 10),
    )  # fmt: skip
    story.traffic.start()
    story.marks["traffic"] = time.monotonic()
    tally = story.traffic.tally
    waits.until(
        lambda: len(tally.consumed) >= 20 and tally.held, timeout_s=90,
        what="healthy consumers consuming and the hung one holding messages",
        seen=tally.describe,
    )  # fmt: skip
    return f"bootstrap {endpoints}; {tally.describe()}"


def _total_lag(access: ClusterAccess) -> dict[tuple[str, int], int]:
    return brokers.lag_by_queue(access, brokers.current(access, CLUSTER), GROUP, TOPIC)


def hung_consumer_stalls_pull(story: Story) -> str:
    """In PULL mode the hung consumer owns queues exclusively: their backlog never shrinks.

    First some queues fall behind; then, over 30 more sends, the queues that stand still (lag
    not down at all) must hold ``STALL_MIN_MESSAGES``: a slow healthy consumer catches up,
    the hung one does not.
    """
    access, tally = story.access, story.running_traffic().tally

    def behind() -> dict[tuple[str, int], int] | None:
        lag = {q: n for q, n in _total_lag(access).items() if n >= 3}
        return lag if sum(lag.values()) >= STALL_MIN_MESSAGES else None

    first = waits.until(
        behind, timeout_s=120, what=f"{STALL_MIN_MESSAGES} messages behind the hung consumer"
    )
    sent = len(tally.acked)
    waits.until(
        lambda: len(tally.acked) >= sent + 30, timeout_s=60, what="30 more acknowledged sends"
    )
    then = _total_lag(access)
    story.stalled = {q: then[q] for q in first if then.get(q, 0) >= first[q]}
    if sum(story.stalled.values()) < STALL_MIN_MESSAGES:
        raise ScenarioError(f"no queue stood still behind the hung consumer: {first} -> {then}")
    return f"{sum(story.stalled.values())} messages stuck on {len(story.stalled)} queues"


def switch_to_pop(story: Story) -> str:
    """``kubectl patch`` the group to POP; ModeApplied, and every broker reads back POP."""
    access = story.access
    access.merge_patch("consumergroup", GROUP, POP_PATCH)
    story.marks["pop"] = time.monotonic()

    def all_pop(obj: Obj) -> bool:
        entries = (obj.get("status") or {}).get("brokers") or []
        return len(entries) == REPLICAS and all(
            e.get("mode") == "POP" and e.get("popShareQueueNum") == 1 and e.get("synced")
            for e in entries
        )

    conditions.wait(
        access, "consumergroup", GROUP, "ModeApplied", timeout_s=90, also=all_pop,
        what="POP/1 on every broker in status",
    )  # fmt: skip
    wait_modes(access, "POP", 1, timeout_s=30, what=f"{GROUP} POP/1 read back on every broker")
    return f"{GROUP}: POP, popShareQueueNum 1 on {REPLICAS}/{REPLICAS} brokers"


def backlog_drains(story: Story) -> str:
    """With the producer paused, every queue — the stalled ones too — reaches zero lag."""
    access, traffic = story.access, story.running_traffic()
    traffic.pause()
    try:
        last: list[dict[tuple[str, int], int]] = [{}]

        def drained() -> bool:
            last[0] = _total_lag(access)
            return bool(last[0]) and not any(last[0].values())

        waits.until(
            drained, timeout_s=120, what="the group's lag to reach 0 on every queue",
            seen=lambda: f"lag {sum(last[0].values())} on {[q for q, n in last[0].items() if n]}",
        )  # fmt: skip
    finally:
        traffic.resume()
    return f"{sum(story.stalled.values())} stuck messages consumed; lag 0 on {len(last[0])} queues"


def printed_columns(listing: str) -> list[dict[str, str]]:
    """Rows of a ``kubectl get`` table by column name (cells are aligned under headers)."""
    header, *rows = listing.splitlines()
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    names = header.split()
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    return [{n: row[a:b].strip() for n, (a, b) in zip(names, bounds, strict=True)} for row in rows]


def columns_show_mode_lag_backlog(story: Story) -> str:
    """``kubectl get cg`` shows MODE, LAG and BACKLOG: POP, and the audit's numbers once audited."""
    access = story.access
    listing = access.kubectl("get", "cg", "-n", access.namespace)
    rows = [r for r in printed_columns(listing) if r.get("NAME") == GROUP]
    audited = (access.get("consumergroup", GROUP).get("status") or {}).get("audit")
    row = rows[0] if rows else {}
    numbers = [row.get("LAG", ""), row.get("BACKLOG", "")]
    if row.get("MODE") != "POP" or (audited and not all(n.isdigit() for n in numbers)):
        raise ScenarioError(f"kubectl get cg: want MODE POP (and LAG/BACKLOG numbers):\n{listing}")
    return " | ".join(" ".join(line.split()) for line in listing.splitlines())


def _pod_uid(access: ClusterAccess, name: str) -> str | None:
    pod = access.get_or_none("pod", name)
    return None if pod is None else str(pod["metadata"]["uid"])


def broker_pod_deleted_mid_traffic(story: Story) -> str:
    """Delete one broker pod while the producer sends; it comes back with its modes."""
    access, traffic = story.access, story.running_traffic()
    victim = f"{CLUSTER}-1"
    old_uid = _pod_uid(access, victim)
    story.logbook.collect_brokers(access, [victim])  # its logs go with the pod
    sent_before = len(traffic.tally.acked)
    access.kubectl("delete", "pod", victim, "-n", access.namespace, "--wait=false")

    def replaced_and_ready() -> bool:
        pod = access.get_or_none("pod", victim)
        return pod is not None and pod["metadata"]["uid"] != old_uid and pod_ready(pod)

    waits.until(replaced_and_ready, timeout_s=180, what=f"a new {victim} pod Ready")
    conditions.wait(
        access, "brokercluster", CLUSTER, "Ready", timeout_s=120,
        also=lambda obj: ready_with(obj, REPLICAS), what=f"{REPLICAS} brokers ready again",
    )  # fmt: skip
    waits.until(
        lambda: members_everywhere(access, brokers.current(access, CLUSTER)), timeout_s=60,
        what="every broker lists the new member endpoints",
    )  # fmt: skip
    conditions.wait(access, "consumergroup", GROUP, "ModeApplied", timeout_s=90)
    still = f"{GROUP} still POP/1 on every broker, the new pod included"
    wait_modes(access, "POP", 1, timeout_s=60, what=still)
    waits.until(
        lambda: len(traffic.tally.acked) >= sent_before + 50, timeout_s=120,
        what="50 more acknowledged sends after the pod came back",
        seen=traffic.tally.describe,
    )  # fmt: skip
    return f"{victim} replaced, POP/1 read back on all 3; {traffic.tally.describe()}"


def pod_ready(pod: Obj) -> bool:
    found = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in found)


def drained(traffic: Traffic, *, timeout_s: float) -> None:
    """Stop producing; wait until every acknowledged send was consumed by a healthy consumer."""
    traffic.stop_producing()
    tally = traffic.tally
    waits.until(
        lambda: not tally.missing(), timeout_s=timeout_s,
        what="every acknowledged message consumed by a healthy consumer",
        seen=lambda: f"{tally.describe()}; missing e.g. {tally.missing()[:5]}",
    )  # fmt: skip


def nothing_acknowledged_is_lost(story: Story) -> str:
    """Stop producing; every acknowledged send is consumed by a healthy consumer.

    The hung consumer still sits on its messages: they come back through revive once their
    invisible time (the broker's default, 60 s) has passed, so this waits longer than that.
    """
    access, traffic = story.access, story.running_traffic()
    tally = traffic.tally
    drained(traffic, timeout_s=240)
    waits.until(
        lambda: not any(_total_lag(access).values()), timeout_s=60, what="lag 0 on every queue"
    )
    summary = f"all {len(tally.acked)} acknowledged messages consumed: {tally.describe()}"
    traffic.stop()
    if traffic.stuck_shutdowns:  # the official client retrying an ack to a replaced pod
        summary += f"; {'; '.join(traffic.stuck_shutdowns)}"
    return summary
