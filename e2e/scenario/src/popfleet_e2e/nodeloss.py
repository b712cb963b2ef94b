"""A replicated broker set losing whole nodes on a multi-node kind cluster (issue 18).

``make e2e-nodes`` (``POPFLEET_E2E_SCENARIO=nodes``) runs it on one control plane and three
workers. The pieces are the replicated scenario's (:mod:`popfleet_e2e.replicated`): the
BrokerCluster ``rep`` (one set of three, SYNC, two in sync), the official client's traffic
through the proxy pod, the history check that every acknowledged send is consumed, the
Lease watch (one holder per term, no term going back), "agreed" (the Lease's holder, the
leader label and the set Service's endpoints all name one pod) and the longest time
without an acknowledged send. What is new is the failure: not a pod but its node.

1. the set's three replicas run on three different workers: the broker set's *preferred*
   pod anti-affinity, proven (one node never holds two of a set's replicas);
2. from a stranger pod on each worker: every replica's client port answers and no admin
   port does, so pod traffic crosses nodes and NetworkPolicy holds on every node;
3. under traffic, the worker that hosts the leader is killed without warning (``docker
   kill`` of its node container): another replica on another node leads, the clients'
   acknowledged sends resume, and none of them is lost;
4. the node is started again (``docker start``): it is Ready, the old replica comes back
   as a follower (truncating what it had not had acknowledged, catching up) and all three
   are in sync again;
5. the same once more on the new leader's node.

Every stage prints a line with its duration; the last step prints one ``figures:`` line.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from popfleet_e2e import brokers, disruptions, logs, replicated, steps, waits
from popfleet_e2e.access import ClusterAccess, Obj, ScenarioError
from popfleet_e2e.steps import Story
from popfleet_e2e.traffic import Traffic

CONTROL_PLANE_ROLE = "node-role.kubernetes.io/control-plane"
STRANGER = "e2e-node-stranger"
TRAFFIC_MAX_S = 900.0  # the producer's own bound for one loss (it is stopped long before)
# A pod restarted on a node that comes back starts before the node's networking does (its
# CNI config survives the restart; kube-proxy's rules and the CNI stand-in's routes are
# written again a few seconds later), so the operator, when it ran there, finds no DNS at
# first. kopf logs each retried request at ERROR; a request that gives up still fails the
# check (it does not say "will retry").
RETRIED_ON_RESTARTED_NODE = re.compile(
    r" ERROR kopf\._core\.reactor\.observation: Request attempt #\d+/\d+ failed; will retry: "
    r".*(ClientConnectorDNSError|ClientConnectorError|ServerDisconnectedError)"
)


@dataclass
class Loss:
    """What one node loss measured (seconds from the ``docker kill``, unless said)."""

    node: str
    old_leader: str
    new_leader: str
    agreed_s: float
    resumed_s: float  # the first AFTER_FAILOVER acknowledged sends after the kill
    longest_pause_s: float
    drained_s: float
    node_ready_s: float  # from the ``docker start``
    in_sync_s: float  # from the ``docker start``
    # the lost replica out of the Lease's in-sync set, after the kill; back in it, after the
    # start (None: never out, or not seen back)
    left_in_sync_s: float | None
    rejoined_in_sync_s: float | None
    acked: int
    lost: int
    terms: str


@dataclass
class Figures:
    spread: dict[str, str] = field(default_factory=dict)  # pod -> node, before the first loss
    losses: list[Loss] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)


_FIGURES: dict[int, Figures] = {}


def _figures(story: Story) -> Figures:
    return _FIGURES.setdefault(id(story), Figures())


def say(line: str) -> None:
    """A stage's progress line, under the step's own."""
    print(f"      - {line}", flush=True)


def workers(nodes: Iterable[Obj]) -> list[str]:
    """The names of the nodes that are not the control plane, sorted."""
    return sorted(
        n["metadata"]["name"]
        for n in nodes
        if CONTROL_PLANE_ROLE not in (n["metadata"].get("labels") or {})
    )


def spread_problem(placed: Mapping[str, str | None], worker_nodes: Iterable[str]) -> str | None:
    """Why the set's pods (pod -> node) are not each on a worker of their own, or None."""
    allowed = set(worker_nodes)
    unplaced = sorted(p for p, n in placed.items() if not n)
    if unplaced:
        return f"not scheduled yet: {unplaced}"
    elsewhere = {p: n for p, n in placed.items() if n not in allowed}
    if elsewhere:
        return f"not on a worker ({sorted(allowed)}): {elsewhere}"
    by_node: dict[str, list[str]] = {}
    for pod, node in placed.items():
        by_node.setdefault(str(node), []).append(pod)
    shared = {n: sorted(p) for n, p in by_node.items() if len(p) > 1}
    if shared:
        return f"a node holds two replicas of the set: {shared}"
    return None


def _s(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:.1f}s"


def figures_line(spread: Mapping[str, str], losses: Iterable[Loss], total_s: float) -> str:
    """The one ``figures:`` line of the run: spread, then per loss what it measured."""
    parts = [f"spread {','.join(f'{p}@{n}' for p, n in sorted(spread.items()))}"]
    for i, loss in enumerate(losses, start=1):
        parts.append(
            f"loss{i} node={loss.node} leader={loss.old_leader}->{loss.new_leader} "
            f"agreed_after={loss.agreed_s:.1f}s resumed_after={loss.resumed_s:.1f}s "
            f"longest_without_ack={loss.longest_pause_s:.1f}s acked={loss.acked} "
            f"lost={loss.lost} node_ready_after_start={loss.node_ready_s:.1f}s "
            f"in_sync_after_start={loss.in_sync_s:.1f}s "
            f"left_in_sync_after={_s(loss.left_in_sync_s)} "
            f"rejoined_in_sync_after_start={_s(loss.rejoined_in_sync_s)} terms=[{loss.terms}]"
        )
    parts.append(f"steps_total={total_s:.0f}s")
    return "figures: " + "; ".join(parts)


class InSyncHistory(replicated.LeaseHistory):
    """The Lease watch of the replicated scenario (one holder per term), which also keeps
    when each write's in-sync set was seen: when the lost replica left it and came back."""

    TEMPLATE = (
        "jsonpath={.metadata.annotations.popfleet\\.io/term} {.spec.holderIdentity} "
        '{.metadata.annotations.popfleet\\.io/in-sync}{"\\n"}'
    )

    def __init__(self, access: ClusterAccess) -> None:
        self.in_sync: list[tuple[float, frozenset[str]]] = []  # (time.monotonic(), members)
        super().__init__(access)

    def _read(self) -> None:
        assert self._watch.stdout is not None
        for line in self._watch.stdout:
            term, holder, members = ([*line.split(), "", "", ""])[:3]
            if term.isdigit():
                self.seen.append((int(term), holder or None))
                members_ = frozenset(m for m in members.split(",") if m)
                self.in_sync.append((time.monotonic(), members_))


def left_and_rejoined(
    seen: Iterable[tuple[float, frozenset[str]]], member: str, *, lost: float, back: float
) -> tuple[float | None, float | None]:
    """From the Lease's in-sync sets over time: how long after ``lost`` ``member`` was first
    out of the set, and how long after ``back`` it was first in it again once out (None:
    never out / not back)."""
    left = rejoined = None
    for when, members in seen:
        if when >= lost and left is None and member not in members:
            left = when - lost
        elif left is not None and when >= back and rejoined is None and member in members:
            rejoined = when - back
    return left, rejoined


def _placement(access: ClusterAccess) -> dict[str, str | None]:
    pods = replicated._pods(access)
    return {name: (pod.get("spec") or {}).get("nodeName") for name, pod in pods.items()}


def _ready(obj: Obj | None) -> bool:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _restarts(pod: Obj | None) -> int:
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
    return sum(int(s.get("restartCount") or 0) for s in statuses)


def node_back(node: Obj, lease: Obj, *, started_at: datetime) -> bool:
    """The node's kubelet runs again: its node Lease renewed after ``started_at`` (the
    ``docker start``) and the node Ready. Ready alone proves nothing: the node controller
    marks a silent node NotReady only after its grace period (40-50 s), which a quick
    restart may beat."""
    renewed = (lease.get("spec") or {}).get("renewTime")
    if not renewed:
        return False
    when = datetime.fromisoformat(str(renewed).replace("Z", "+00:00"))
    return when > started_at and _ready(node)


def replica_back(pod: Obj | None, *, restarts_before: int) -> bool:
    """The lost node's replica runs again: its containers started anew on the restarted
    node (their restart count went up) and the pod is Ready. Its Ready condition alone
    may be the stale one from before the loss."""
    return _restarts(pod) > restarts_before and _ready(pod)


def spread_over_workers(story: Story) -> str:
    """The replicated cluster applied; a settled leader, all in sync; and its three
    replicas on three different workers (the preferred anti-affinity held)."""
    access = story.access
    figures = _figures(story)
    nodes = workers(access.items("nodes", namespace="*"))
    if len(nodes) < replicated.REPLICAS:
        raise ScenarioError(f"want {replicated.REPLICAS} workers at least, found {nodes}")
    created = replicated.created(story)
    placed = _placement(access)
    if problem := spread_problem(placed, nodes):
        raise ScenarioError(f"the set's replicas are not spread over the workers: {problem}")
    figures.spread = {p: str(n) for p, n in placed.items()}
    operators = access.items(
        "pods", namespace=access.release_namespace, selector=logs.OPERATOR_SELECTOR
    )
    where = sorted(str((o.get("spec") or {}).get("nodeName")) for o in operators)
    return (
        f"{created}; {', '.join(f'{p} on {n}' for p, n in sorted(placed.items()))}; "
        f"the operator on {', '.join(where) or 'no node'}"
    )


def _stranger(image: str, hosts: list[str], client_port: str, node: str) -> Obj:
    pod = disruptions._stranger_pod(image, hosts, client_port)
    pod["metadata"]["name"] = f"{STRANGER}-{node}"
    pod["spec"]["nodeName"] = node
    return pod


def _finished(access: ClusterAccess, name: str) -> str:
    return waits.until(
        lambda: disruptions._finished(access.get("pod", name)),
        timeout_s=180, what=f"the {name} pod to finish",
    )  # fmt: skip


def policy_on_every_node(story: Story) -> str:
    """From a stranger pod on each worker, every replica's client port answers and no admin
    port does: pods reach pods on other nodes (the CNI stand-in's routes) with their own
    source address, and kube-router enforces the brokers' NetworkPolicy on every node."""
    access = story.access
    listed = brokers.current(access, replicated.CLUSTER)
    image = str(access.get("brokercluster", replicated.CLUSTER)["spec"].get("image"))
    pods = replicated._pods(access)
    hosts = sorted(str(p["status"]["podIP"]) for p in pods.values())
    client_port = listed[0].endpoint.rsplit(":", 1)[1]
    nodes = workers(access.items("nodes", namespace="*"))
    names = [f"{STRANGER}-{n}" for n in nodes]
    results: dict[str, Obj] = {}
    try:
        for node in nodes:
            manifest = json.dumps(_stranger(image, hosts, client_port, node))
            access.kubectl("apply", "-n", access.namespace, "-f", "-", stdin=manifest)
        for node, name in zip(nodes, names, strict=True):
            phase = _finished(access, name)
            out = access.kubectl("logs", name, "-n", access.namespace).strip().splitlines()
            if phase != "Succeeded" or not out:
                raise ScenarioError(f"{name} ended {phase}: {out}")
            results[node] = dict(json.loads(out[-1]))
    finally:
        access.kubectl(
            "delete", "pod", *names, "-n", access.namespace, "--wait=false", "--ignore-not-found"
        )
    bad = {
        node: seen
        for node, seen in results.items()
        if any(r != "open" for r in seen["client"].values())
        or any(r == "open" for r in seen["admin"].values())
    }
    if bad:
        raise ScenarioError(
            f"want every client port open and every admin port closed from every node: {bad}"
        )
    refusals = sorted({r for seen in results.values() for r in seen["admin"].values()})
    return (
        f"from {len(nodes)} workers: client port open on all {len(hosts)} replicas, admin "
        f"port refused ({', '.join(refusals)})"
    )


def _timed(what: str, started: float, run: Callable[[], object]) -> float:
    """Run ``run`` (a bounded wait); say how long ``what`` took from ``started``."""
    run()
    took = time.monotonic() - started
    say(f"{what} after {took:.1f}s")
    return took


def _lose_leaders_node(story: Story) -> str:
    access = story.access
    power = access.node_power
    if power is None:
        raise ScenarioError("this cluster gives no way to kill a node (make e2e-nodes does)")
    endpoints = brokers.bootstrap(access, [], cluster=replicated.CLUSTER)
    traffic = Traffic(
        endpoints=endpoints, topic=replicated.TOPIC, group=replicated.GROUP, hung=False,
        max_s=TRAFFIC_MAX_S, max_messages=int(TRAFFIC_MAX_S * 10),
    )  # fmt: skip
    traffic.start()
    tally = traffic.tally
    history = InSyncHistory(access)
    node: str | None = None
    up = True
    try:
        t = time.monotonic()
        waits.until(
            lambda: len(tally.consumed) >= 20, timeout_s=120, what="20 consumed from the set",
            seen=tally.describe,
        )  # fmt: skip
        say(f"traffic: 20 consumed from the set in {time.monotonic() - t:.1f}s")
        first = replicated.leader(access)
        if first is None:
            raise ScenarioError(f"no leader before the loss: {replicated.describe(access)}")
        node = _placement(access).get(first)
        if not node:
            raise ScenarioError(f"the leader {first} runs on no node")
        lost_node: str = node
        before = len(tally.acked)
        restarts_before = _restarts(access.get_or_none("pod", first))
        story.logbook.collect_brokers(access, sorted(replicated._pods(access)))
        killed = time.monotonic()
        power("kill", node)
        up = False
        say(f"docker kill {node} (it hosts the leader {first})")
        agreed: list[str] = []
        agreed_s = _timed(
            "another replica leads (Lease, label and Service agreed)", killed,
            lambda: agreed.append(waits.until(
                lambda: replicated._settled(access, not_=first),
                timeout_s=180, what="a new settled leader",
                seen=lambda: replicated.describe(access),
            )),
        )  # fmt: skip
        second = agreed[0]
        resumed_s = _timed(
            f"{replicated.AFTER_FAILOVER} acknowledged sends", killed,
            lambda: waits.until(
                lambda: len(tally.acked) >= before + replicated.AFTER_FAILOVER, timeout_s=180,
                what=f"{replicated.AFTER_FAILOVER} acknowledged sends after",
                seen=tally.describe,
            ),
        )  # fmt: skip
        drained_s = _timed(
            "every acknowledged send consumed", killed,
            lambda: steps.drained(traffic, timeout_s=240),
        )  # fmt: skip
        started, started_at = time.monotonic(), datetime.now(UTC)
        power("start", node)
        up = True
        say(f"docker start {node}")
        ready_s = _timed(
            f"{node} Ready", started,
            lambda: waits.until(
                lambda: node_back(
                    access.get("node", node),
                    access.get("lease", node, namespace="kube-node-lease"),
                    started_at=started_at,
                ),
                timeout_s=240, what=f"{node}'s kubelet back (Lease renewed) and Ready",
            ),
        )  # fmt: skip
        in_sync_s = _timed(
            f"{first} back, Ready and all three in sync", started,
            lambda: waits.until(
                lambda: replica_back(access.get_or_none("pod", first),
                                     restarts_before=restarts_before)
                and replicated._in_sync(access) == replicated.PODS,
                timeout_s=300, what="all three replicas back and in sync",
                seen=lambda: replicated.describe(access),
            ),
        )  # fmt: skip
    finally:
        if not up and node is not None:
            power("start", node)  # whatever failed, the node comes back
        traffic.stop()
        history.stop()
    if problems := history.problems():
        raise ScenarioError(f"the Lease's history breaks one holder per term: {problems}")
    pause = tally.longest_pause(killed)
    left, rejoined = left_and_rejoined(history.in_sync, first, lost=killed, back=started)
    lost = len(tally.missing())
    loss = Loss(
        node=lost_node, old_leader=first, new_leader=second, agreed_s=agreed_s, resumed_s=resumed_s,
        longest_pause_s=pause[0] if pause else 0.0, drained_s=drained_s, node_ready_s=ready_s,
        in_sync_s=in_sync_s, left_in_sync_s=left, rejoined_in_sync_s=rejoined,
        acked=len(tally.acked), lost=lost,
        terms=history.terms(),
    )  # fmt: skip
    _figures(story).losses.append(loss)
    return (
        f"{lost_node} killed with the leader {first}; {second} leads on "
        f"{_placement(access)[second]} "
        f"(agreed by {agreed_s:.1f}s); {first} out of the in-sync set after {_s(left)}, "
        f"back in it {_s(rejoined)} after the start; "
        f"{loss.longest_pause_s:.1f}s without an acknowledged send; "
        f"all {loss.acked} acknowledged consumed ({tally.describe()}); {lost_node} back, "
        f"all three in sync {in_sync_s:.1f}s after the start; Lease terms {loss.terms}"
    )


def leaders_node_lost_under_traffic(story: Story) -> str:
    """Kill the leader's node (``docker kill``) mid-traffic: another replica on another node
    leads, nothing acknowledged is lost; the node comes back and its replica catches up."""
    return _lose_leaders_node(story)


def allowed_after_restarts(
    problems: Mapping[str, list[str]], *, operator_namespace: str
) -> tuple[dict[str, list[str]], int]:
    """``problems`` (where -> offending lines, ``LogBook.problems``) without the operator's
    retried requests of a start on a restarted node; and how many were let through."""
    left: dict[str, list[str]] = {}
    allowed = 0
    for where, lines in problems.items():
        operator = where.startswith(f"{operator_namespace}/")
        kept = [ln for ln in lines if not (operator and RETRIED_ON_RESTARTED_NODE.search(ln))]
        allowed += len(lines) - len(kept)
        if kept:
            left[where] = kept
    return left, allowed


def logs_clean(story: Story) -> str:
    """The operator's and brokers' logs: no unexpected errors, but for the operator's retried
    API requests while it started again on a restarted node (``RETRIED_ON_RESTARTED_NODE``)."""
    access = story.access
    story.logbook.collect_brokers(access)
    story.logbook.collect_operator(access)
    left, allowed = allowed_after_restarts(
        story.logbook.problems(), operator_namespace=access.release_namespace
    )
    if left:
        shown = "\n".join(
            f"{where} ({len(lines)}):\n  " + "\n  ".join(lines[:8]) for where, lines in left.items()
        )
        raise ScenarioError(f"unexpected errors in logs:\n{shown}")
    return (
        f"{len(story.logbook.texts)} logs checked, no unexpected errors; {allowed} retried "
        "request(s) of the operator starting on a restarted node allowed"
    )


def figures(story: Story) -> str:
    """The run's figures on one line; then the replicated cluster goes (its logs kept)."""
    access = story.access
    story.logbook.collect_brokers(access, sorted(replicated._pods(access)))
    access.kubectl(
        "delete", "brokercluster", replicated.CLUSTER, "-n", access.namespace, timeout_s=180
    )
    found = _figures(story)
    line = figures_line(found.spread, found.losses, time.monotonic() - found.started)
    print(line, flush=True)
    return f"{len(found.losses)} node losses measured"
