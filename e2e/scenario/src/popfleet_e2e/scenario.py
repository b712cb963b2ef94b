"""The end-to-end scenario, written once: the steps in order, timed and reported.

Callers: ``e2e/kind`` (``KIND``, with its own access and resolver, in ``make test``),
``e2e/local`` (``FULL`` on the testbed, ``make test-e2e-local``) and ``make demo``
(``demo.py`` runs the first steps and keeps traffic going).

    from popfleet_e2e import operatorfaults, scenario
    from popfleet_e2e.access import ClusterAccess, ScenarioError
    timings = scenario.run(ClusterAccess(kubeconfig=..., namespace="story", resolve=...))

Each step is a function of the ``Story`` that raises ``ScenarioError`` (with what it waited
for and what it saw) or returns a one-line summary, printed as the step ends. ``run`` always
stops the traffic it started, even when a step fails.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from popfleet_e2e import (
    auditing,
    disruptions,
    elastic,
    lifecycle,
    logs,
    nodeloss,
    observe,
    operatorfaults,
    replicated,
    sparkapps,
    steps,
)
from popfleet_e2e.access import ClusterAccess, Obj, ScenarioError
from popfleet_e2e.steps import Story

Say = Callable[[str], None]


@dataclass(frozen=True)
class Step:
    title: str
    run: Callable[[Story], str]


def _install(story: Story) -> str:
    return lifecycle.install_chart(story.access)


def _logs_clean(story: Story) -> str:
    story.logbook.collect_brokers(story.access)
    story.logbook.collect_operator(story.access)
    return logs.check(story.logbook)


def _upgrade(story: Story) -> str:
    story.logbook.collect_operator(story.access)  # the upgrade replaces the operator's pod
    return lifecycle.upgrade_with_crd_change(story.access, group=steps.GROUP)


def _enable_audits(story: Story) -> str:
    return auditing.enabled_every_minute(story.access, cluster=steps.CLUSTER)


def _audit_ran(story: Story) -> str:
    return auditing.ran_on_schedule(story.access, cluster=steps.CLUSTER, group=steps.GROUP)


def _enable_kubernetes_audits(story: Story) -> str:
    story.audit_pods = auditing.PodTally(story.access, steps.CLUSTER).start()
    shape = auditing.KUBERNETES
    return auditing.enabled_every_minute(story.access, cluster=steps.CLUSTER, shape=shape)


def _kubernetes_audit_ran(story: Story) -> str:
    tally = story.audit_pods
    if tally is None:
        raise ScenarioError("no audit pod tally: enable the audits first")
    try:
        return auditing.ran_with_executors(
            story.access, cluster=steps.CLUSTER, group=steps.GROUP, tally=tally
        )
    finally:
        tally.stop()


def _uninstall(story: Story) -> str:
    return lifecycle.uninstall_leaves_nothing(story.access)


SETUP: tuple[Step, ...] = (
    Step("helm install the chart (CRDs, operator, RBAC)", _install),
    Step("kubectl apply a BrokerCluster of 3 brokers", steps.create_cluster),
    Step("kubectl apply a Topic and a ConsumerGroup (PULL)", steps.apply_topics_and_groups),
    Step("traffic: producer, 2 PushConsumers, 1 hung PushConsumer", steps.start_traffic),
    Step("PULL: the hung consumer's queues stall", steps.hung_consumer_stalls_pull),
    Step("kubectl patch the group to POP; ModeApplied on all brokers", steps.switch_to_pop),
    Step("the hung consumer's backlog drains", steps.backlog_drains),
)

# Audits: a Spark run takes a minute or more on a small machine, so the schedule is enabled
# before the traffic starts and the first run overlaps the traffic steps.
ENABLE_AUDITS = Step("enable audits every minute (Job backend, PySpark)", _enable_audits)
AUDIT_RAN = Step("an audit ran on schedule and wrote the group's findings", _audit_ran)

_UNTIL_POD_DELETED: tuple[Step, ...] = (
    *SETUP[:3],
    ENABLE_AUDITS,
    *SETUP[3:],
    AUDIT_RAN,
    Step("kubectl get cg shows MODE, LAG, BACKLOG", steps.columns_show_mode_lag_backlog),
    Step("delete a broker pod mid-traffic", steps.broker_pod_deleted_mid_traffic),
)
_FROM_NO_LOSS: tuple[Step, ...] = (
    Step("no acknowledged message lost", steps.nothing_acknowledged_is_lost),
    Step("helm upgrade: new chart version with a CRD change", _upgrade),
    Step("operator and broker logs: no unexpected errors", _logs_clean),
    Step("helm uninstall leaves nothing behind", _uninstall),
)
FULL: tuple[Step, ...] = (*_UNTIL_POD_DELETED, *_FROM_NO_LOSS)

# A replicated BrokerCluster beside the story's (issue 18): its leader pod lost under traffic.
REPLICATED: tuple[Step, ...] = (
    Step(
        "kubectl apply a replicated BrokerCluster (1 set of 3, SYNC, 2 in sync)",
        replicated.created,
    ),
    Step(
        "the replicated set loses its leader pod under traffic; nothing acknowledged lost",
        replicated.leader_lost_under_traffic,
    ),
    Step(
        "the leader's store process SIGKILLed under traffic; nothing acknowledged lost",
        replicated.leader_store_killed_under_traffic,
    ),
    Step(
        "the leader isolated by NetworkPolicy under traffic; it is fenced, rejoins, follows",
        replicated.leader_isolated_under_traffic,
    ),
    Step(
        "the leader's pod and disk (claim) deleted under traffic; it rejoins empty, catches up",
        replicated.leader_disk_lost_under_traffic,
    ),
)

# On a real cluster (kind) the story also shows what only kubelets, a CNI with NetworkPolicy
# and the Eviction API can: these run under the same traffic, before the no-loss check.
REAL_CLUSTER_ONLY: tuple[Step, ...] = (
    Step("the hung consumer gives its messages back", disruptions.hung_consumer_released),
    Step(
        "NetworkPolicy: a stranger pod cannot reach the admin port",
        disruptions.network_policy_enforced,
    ),
    Step("PodDisruptionBudget refuses a second eviction", disruptions.disruption_budget_holds),
    Step("liveness probe restarts a frozen broker", disruptions.liveness_restarts_a_frozen_broker),
    Step(
        "operator killed mid-fan-out of 80 objects; the next pod converges them",
        operatorfaults.operator_killed_mid_fan_out,
    ),
    Step(
        "rolling upgrade of the broker image under traffic",
        disruptions.rolling_upgrade_under_traffic,
    ),
    *REPLICATED,
)
# On kind the audits run on Spark's Kubernetes backend: executor pods from our image, then
# once more through a SparkApplication that the real Spark operator executes.
ENABLE_KUBERNETES_AUDITS = Step(
    "enable audits every minute (Job backend, k8s:// master, 2 executor pods)",
    _enable_kubernetes_audits,
)
KUBERNETES_AUDIT_RAN = Step(
    "an audit ran with executor pods and wrote the group's findings", _kubernetes_audit_ran
)
SPARK_APPLICATION_RAN = Step(
    "an audit through a SparkApplication run by the Spark operator",
    sparkapps.ran_through_the_spark_operator,
)
_KIND_UNTIL_POD_DELETED: tuple[Step, ...] = tuple(
    {ENABLE_AUDITS: ENABLE_KUBERNETES_AUDITS, AUDIT_RAN: KUBERNETES_AUDIT_RAN}.get(step, step)
    for step in _UNTIL_POD_DELETED
)
# On kind a real Prometheus (prometheus-operator, both built here) scrapes the chart's
# PodMonitors and evaluates its PrometheusRule (issue 19): installed before the chart, the lag
# alert fires for the hung PULL consumer and resolves once POP drained it, and every dashboard
# and rule query returns series while the replicated set still runs (``observe``).
MONITORING_INSTALLED = Step(
    "prometheus-operator and Prometheus (built here) select every PodMonitor and rule",
    observe.installed,
)
OBSERVED_AFTER: dict[Step, Step] = {
    SETUP[4]: Step(
        "Prometheus: every target up; PopfleetConsumerLagGrowing fires for the hung consumer",
        observe.lag_alert_fires,
    ),
    SETUP[6]: Step("Prometheus: the lag alert resolves after POP", observe.lag_alert_resolves),
    REPLICATED[3]: Step(
        "Prometheus: every dashboard, rule and KEDA query returns series",
        observe.every_query_returns_series,
    ),
}


def observed(chosen: Sequence[Step]) -> tuple[Step, ...]:
    """``chosen`` with the monitoring stack installed first and ``OBSERVED_AFTER``'s steps."""
    out = [MONITORING_INSTALLED]
    for step in chosen:
        out.append(step)
        if step in OBSERVED_AFTER:
            out.append(OBSERVED_AFTER[step])
    return tuple(out)


KIND: tuple[Step, ...] = observed(
    (*_KIND_UNTIL_POD_DELETED, SPARK_APPLICATION_RAN, *REAL_CLUSTER_ONLY, *_FROM_NO_LOSS)
)
# For work on the replicated steps alone (``POPFLEET_E2E_SCENARIO=replicated`` on kind).
# The chart's PodMonitors need prometheus-operator's CRDs; the queries need the story's group.
KIND_REPLICATED: tuple[Step, ...] = (
    MONITORING_INSTALLED,
    SETUP[0],
    *REPLICATED,
    *_FROM_NO_LOSS[-2:],
)
# For work on the observability steps alone (``POPFLEET_E2E_SCENARIO=observe`` on kind).
KIND_OBSERVE: tuple[Step, ...] = (
    *observed((*SETUP[:3], ENABLE_AUDITS, *SETUP[3:])),  # audits: the AuditHealthy queries
    REPLICATED[0],
    OBSERVED_AFTER[REPLICATED[3]],
    _FROM_NO_LOSS[0],  # the stale ack's message too, redelivered
    *_FROM_NO_LOSS[-2:],
)
# Consumers scaled by their lag with KEDA, PULL against POP (``make e2e-keda``; issue 19).
# The scaling itself, once KEDA runs: also make demo's elastic act on the testbed (``beside``).
ELASTIC: tuple[Step, ...] = (
    Step(
        "PULL, 2 queues: KEDA scales the consumers 2 -> 8 and throughput stays flat",
        elastic.pull_stays_flat,
    ),
    Step(
        "kubectl patch the group to POP: 8 replicas drain the backlog, KEDA scales down",
        elastic.pop_drains,
    ),
    Step("POP: KEDA scales up again and throughput grows with replicas", elastic.pop_grows),
)
KIND_KEDA: tuple[Step, ...] = (
    MONITORING_INSTALLED,
    SETUP[0],
    Step("KEDA (built here) installed: operator, metrics apiserver", elastic.keda_installed),
    *ELASTIC,
    *_FROM_NO_LOSS[-2:],
)
# A replicated set losing whole nodes on 1 control plane + 3 workers (``make e2e-nodes``,
# ``POPFLEET_E2E_SCENARIO=nodes``; issue 18). No monitoring stack: the chart's PodMonitors off.
NODE_LOSS: tuple[Step, ...] = (
    Step(
        "worker node killed (docker kill) under traffic with the leader; it comes back, catches up",
        nodeloss.leaders_node_lost_under_traffic,
    ),
    Step(
        "again on the new leader's node; nothing acknowledged lost",
        nodeloss.leaders_node_lost_under_traffic,
    ),
)
KIND_NODES: tuple[Step, ...] = (
    SETUP[0],
    Step(
        "kubectl apply a replicated BrokerCluster; its 3 replicas on 3 different workers",
        nodeloss.spread_over_workers,
    ),
    Step(
        "from every worker: client ports open, admin ports refused (routes and NetworkPolicy)",
        nodeloss.policy_on_every_node,
    ),
    *NODE_LOSS,
    Step("figures; the replicated cluster deleted", nodeloss.figures),
    Step(
        "operator and broker logs: no unexpected errors (restarted nodes' retries aside)",
        nodeloss.logs_clean,
    ),
    _FROM_NO_LOSS[-1],
)
SCENARIOS = {
    "kind": KIND,
    "replicated": KIND_REPLICATED,
    "observe": KIND_OBSERVE,
    "keda": KIND_KEDA,
    "nodes": KIND_NODES,
}


# The story's BrokerCluster is the example's with shorter liveness timings: the frozen-broker
# step waits for the restart, 15 s of failed probes instead of the default 60 (the defaults are
# the unit tests'; a 2-s probe timeout keeps a busy store from failing one on a loaded node).
STORY_CLUSTER_SPEC: Obj = {
    "livenessProbe": {"periodSeconds": 5, "failureThreshold": 3, "timeoutSeconds": 2}
}


def run_steps(story: Story, chosen: Sequence[Step], *, say: Say = print) -> dict[str, float]:
    """Run ``chosen`` in order; seconds per step title. Does not stop the traffic."""
    timings: dict[str, float] = {}
    for number, step in enumerate(chosen, start=1):
        say(f"[{number}/{len(chosen)}] {step.title} ...")
        started = time.monotonic()
        summary = step.run(story)
        timings[step.title] = time.monotonic() - started
        say(f"      ok in {timings[step.title]:.1f}s: {summary}")
    return timings


def run(
    access: ClusterAccess, *, chosen: Sequence[Step] = FULL, say: Say = print
) -> dict[str, float]:
    """The whole story on ``access``; traffic is stopped whatever happens."""
    story = Story(access, cluster_spec=STORY_CLUSTER_SPEC)
    try:
        return run_steps(story, chosen, say=say)
    finally:
        if story.traffic is not None:
            story.traffic.stop()
        elastic.stop(story)
