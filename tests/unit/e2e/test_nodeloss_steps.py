"""The node-loss kind steps' own logic (``make e2e-nodes``): which nodes are workers, the
set's spread over them, the figures line, and the scenario's wiring."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from popfleet_e2e import nodeloss, replicated, scenario

STARTED = datetime(2026, 12, 7, 11, 0, 0, tzinfo=UTC)
READY = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
NOT_READY = {"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}


def _node(name: str, *labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {label: "" for label in labels}}}


def test_workers_are_the_nodes_without_the_control_plane_role() -> None:
    nodes: list[dict[str, Any]] = [
        _node("c-worker2", "kubernetes.io/os"),
        _node("c-control-plane", nodeloss.CONTROL_PLANE_ROLE),
        _node("c-worker"),
        {"metadata": {"name": "c-worker3"}},  # no labels at all
    ]
    assert nodeloss.workers(nodes) == ["c-worker", "c-worker2", "c-worker3"]


def test_three_replicas_on_three_workers_is_a_spread() -> None:
    placed = {"rep-0": "w1", "rep-r1-0": "w3", "rep-r2-0": "w2"}
    assert nodeloss.spread_problem(placed, ["w1", "w2", "w3"]) is None


def test_two_replicas_on_one_node_is_reported() -> None:
    placed = {"rep-0": "w1", "rep-r1-0": "w1", "rep-r2-0": "w2"}
    assert nodeloss.spread_problem(placed, ["w1", "w2", "w3"]) == (
        "a node holds two replicas of the set: {'w1': ['rep-0', 'rep-r1-0']}"
    )


def test_unscheduled_pods_and_pods_off_the_workers_are_reported() -> None:
    workers = ["w1", "w2", "w3"]
    assert nodeloss.spread_problem({"rep-0": None, "rep-r1-0": "w1"}, workers) == (
        "not scheduled yet: ['rep-0']"
    )
    assert nodeloss.spread_problem({"rep-0": "cp", "rep-r1-0": "w1"}, workers) == (
        "not on a worker (['w1', 'w2', 'w3']): {'rep-0': 'cp'}"
    )


def test_the_figures_line_names_every_loss() -> None:
    loss = nodeloss.Loss(
        node="c-worker2", old_leader="rep-0", new_leader="rep-r1-0", agreed_s=9.04,
        resumed_s=11.0, longest_pause_s=8.25, drained_s=20.0, node_ready_s=31.5,
        in_sync_s=48.0, left_in_sync_s=16.5, rejoined_in_sync_s=None, acked=812, lost=0,
        terms="1: rep-0, 2: rep-r1-0",
    )  # fmt: skip
    line = nodeloss.figures_line({"rep-r1-0": "c-worker", "rep-0": "c-worker2"}, [loss], 300.4)
    assert line == (
        "figures: spread rep-0@c-worker2,rep-r1-0@c-worker; "
        "loss1 node=c-worker2 leader=rep-0->rep-r1-0 agreed_after=9.0s resumed_after=11.0s "
        "longest_without_ack=8.2s acked=812 lost=0 node_ready_after_start=31.5s "
        "in_sync_after_start=48.0s left_in_sync_after=16.5s rejoined_in_sync_after_start=never "
        "terms=[1: rep-0, 2: rep-r1-0]; steps_total=300s"
    )


def test_the_nodes_scenario_loses_two_nodes_and_cleans_up() -> None:
    chosen = scenario.SCENARIOS["nodes"]
    runs = [step.run for step in chosen]
    assert chosen[0] == scenario.SETUP[0]  # the chart first
    assert runs.count(nodeloss.leaders_node_lost_under_traffic) == 2
    assert runs.index(nodeloss.spread_over_workers) < runs.index(
        nodeloss.leaders_node_lost_under_traffic
    )
    assert runs.index(nodeloss.figures) > len(runs) - 4  # figures, then logs and uninstall
    assert chosen[-1] == scenario.KIND[-1]  # helm uninstall leaves nothing behind
    assert scenario.MONITORING_INSTALLED not in chosen  # no Prometheus on this cluster
    assert replicated.REPLICAS == 3  # one replica per worker of the 1 + 3 cluster


def test_a_node_is_back_once_its_kubelet_renewed_its_lease_after_the_start() -> None:
    before = {"spec": {"renewTime": "2026-12-07T10:59:58.123456Z"}}
    after = {"spec": {"renewTime": "2026-12-07T11:00:03.000001Z"}}
    # still Ready from before the kill (the node controller's grace period): not back
    assert not nodeloss.node_back(READY, before, started_at=STARTED)
    assert not nodeloss.node_back(NOT_READY, after, started_at=STARTED)
    assert not nodeloss.node_back(READY, {"spec": {}}, started_at=STARTED)
    assert nodeloss.node_back(READY, after, started_at=STARTED)


def test_a_replica_is_back_once_its_containers_started_anew_and_it_is_ready() -> None:
    def pod(restarts: list[int], ready: bool) -> dict[str, object]:
        status = (READY if ready else NOT_READY)["status"]
        statuses = [{"name": f"c{i}", "restartCount": n} for i, n in enumerate(restarts)]
        return {"status": {**status, "containerStatuses": statuses}}

    assert not nodeloss.replica_back(pod([0, 0, 0], True), restarts_before=0)  # stale Ready
    assert not nodeloss.replica_back(pod([1, 1, 0], False), restarts_before=0)
    assert nodeloss.replica_back(pod([1, 1, 1], True), restarts_before=0)
    assert not nodeloss.replica_back(None, restarts_before=0)


def test_when_the_lost_replica_left_the_in_sync_set_and_came_back() -> None:
    everyone = frozenset(replicated.PODS)
    two = everyone - {"rep-0"}
    seen = [(9.0, two), (10.0, everyone), (20.0, everyone), (26.5, two), (40.0, two),
            (45.0, two), (51.0, everyone)]  # fmt: skip
    # lost at 10, started again at 41: out 16.5 s after the loss, back 10 s after the start
    assert nodeloss.left_and_rejoined(seen, "rep-0", lost=10.0, back=41.0) == (16.5, 10.0)
    # never out (a restart inside the lag period), or out and not back yet
    assert nodeloss.left_and_rejoined(seen[:3], "rep-0", lost=10.0, back=15.0) == (None, None)
    assert nodeloss.left_and_rejoined(seen[:6], "rep-0", lost=10.0, back=41.0) == (16.5, None)


RETRIED = (
    "2026-12-07 11:32:44,523 ERROR kopf._core.reactor.observation: Request attempt #1/9 "
    "failed; will retry: GET https://kubernetes.default.svc/apis -> ClientConnectorDNSError("
    "ConnectionKey(host='kubernetes.default.svc', port=443), gaierror(-2, 'Name or service "
    "not known'))"
)


def test_only_the_operators_retried_requests_are_allowed_after_a_node_restart() -> None:
    gave_up = RETRIED.replace("#1/9", "#9/9").replace("will retry", "giving up")
    other = "2026-12-07 11:32:45,000 ERROR kopf.objects: Handler 'reconcile' failed"
    problems = {
        "popfleet-system/popfleet-abc/operator@u1": [RETRIED, RETRIED, gave_up, other],
        "popfleet-e2e/rep-0/store@u2": [RETRIED],  # not the operator: kept
    }
    left, allowed = nodeloss.allowed_after_restarts(problems, operator_namespace="popfleet-system")
    assert allowed == 2
    assert left == {
        "popfleet-system/popfleet-abc/operator@u1": [gave_up, other],
        "popfleet-e2e/rep-0/store@u2": [RETRIED],
    }
    clean, allowed = nodeloss.allowed_after_restarts(
        {"popfleet-system/p/operator@u": [RETRIED]}, operator_namespace="popfleet-system"
    )
    assert (clean, allowed) == ({}, 1)


def test_the_nodes_scenario_checks_logs_with_the_restart_allowance() -> None:
    runs = [step.run for step in scenario.SCENARIOS["nodes"]]
    assert nodeloss.logs_clean in runs
    assert runs.index(nodeloss.logs_clean) > runs.index(nodeloss.figures)
