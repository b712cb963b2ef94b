"""Audits scheduled by the chart-installed operator on the testbed (DESIGN §4, issue 7).

One BrokerCluster with one broker, a Topic and a POP ConsumerGroup for the module; in order:

1. a due cron schedule (backend ``auto``, no Spark operator) -> a Job, with the audit
   ServiceAccount/Role/RoleBinding and ``status.audit``; concurrency Forbid holds;
2. with a minimal SparkApplication CRD installed, ``auto`` + run-now -> a SparkApplication
   (nothing runs it: the object is asserted), and the CRD is removed again;
3. messages produced and some popped and left un-acked through the official client; run-now
   -> the process kubelet runs the Job pod (``popfleet-audit all --master local[2]``) under
   the audit Role; ``kubectl get cg`` then shows LAG and BACKLOG from that run, the run is
   ``Succeeded``, ``AuditHealthy`` is True and the history limit prunes the older run.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

import pytest

from popfleet_api.client import BrokerAdmin
from popfleet_testbed import cluster, kube, waiting
from popfleet_testbed import errors as kube_errors
from tests.integration.broker import officialclient
from tests.integration.operator import story

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("operator_log_clean")]

CLUSTER = "audited"
TOPIC = "payments"
GROUP = "ledger"
RUN_LABELS = f"app.kubernetes.io/name=popfleet-audit,app.kubernetes.io/instance={CLUSTER}"
RUN_NOW = "popfleet.io/audit-run-now"
SPARK_CRD = "sparkapplications.sparkoperator.k8s.io"
PRODUCED = 10
INVISIBLE_S = 1800  # popped messages stay un-acked (no revive) for the whole test


def cluster_cr() -> dict[str, Any]:
    return {
        "apiVersion": "popfleet.io/v1alpha1",
        "kind": "BrokerCluster",
        "metadata": {"name": CLUSTER},
        # Checkpoints leave the in-memory buffer after 0.5 s: the audit reads the revive log.
        "spec": {"brokers": 1, "storage": {"size": "64Mi"}, "pop": {"ckStayBufferTimeMs": 500}},
    }


def topic_cr() -> dict[str, Any]:
    return {
        "apiVersion": "popfleet.io/v1alpha1",
        "kind": "Topic",
        "metadata": {"name": TOPIC},
        # One queue, so every message lies in a queue the group has committed an offset on:
        # the audit's lag covers those queues (the admin API's offsets() also counts queues
        # never committed on, from their min offset).
        "spec": {"clusterRef": {"name": CLUSTER}, "queues": 1},
    }


def group_cr() -> dict[str, Any]:
    return {
        "apiVersion": "popfleet.io/v1alpha1",
        "kind": "ConsumerGroup",
        "metadata": {"name": GROUP},
        "spec": {
            "clusterRef": {"name": CLUSTER},
            "topics": [{"name": TOPIC}],
            "consumeMode": "POP",
        },
    }


def spark_crd() -> dict[str, Any]:
    """The smallest SparkApplication CRD the operator accepts (the kubeflow group/version)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": SPARK_CRD,
            # *.k8s.io groups are protected; the kubeflow CRD carries such an annotation too.
            "annotations": {"api-approved.kubernetes.io": "unapproved, a test's minimal copy"},
        },
        "spec": {
            "group": "sparkoperator.k8s.io",
            "scope": "Namespaced",
            "names": {
                "kind": "SparkApplication",
                "plural": "sparkapplications",
                "singular": "sparkapplication",
                "listKind": "SparkApplicationList",
            },
            "versions": [
                {
                    "name": "v1beta2",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def ns(popfleet_release: cluster.Cluster) -> Iterator[str]:
    name = popfleet_release.new_namespace("audit")
    popfleet_release.apply(name, cluster_cr(), topic_cr(), group_cr())
    story.wait_condition(popfleet_release, name, "brokerclusters", CLUSTER, "Ready", timeout_s=120)
    story.wait_condition(popfleet_release, name, "consumergroups", GROUP, "ModeApplied")
    yield name
    popfleet_release.delete_namespace(name)


def set_audit(tb: cluster.Cluster, ns: str, audit: dict[str, Any]) -> None:
    story.patch_spec(tb, ns, "brokerclusters", CLUSTER, {"audit": audit})


def run_now(tb: cluster.Cluster, ns: str, value: str) -> None:
    tb.admin.patch(
        story.path(ns, "brokerclusters", CLUSTER),
        {"metadata": {"annotations": {RUN_NOW: value}}},
        content_type=kube.MERGE,
    )


def runs(tb: cluster.Cluster, ns: str, plural: str, group: str) -> list[dict[str, Any]]:
    found = tb.admin.items(kube.ns_path(ns, plural, group=group), {"labelSelector": RUN_LABELS})
    return sorted(found, key=lambda r: r["metadata"]["name"])


def jobs(tb: cluster.Cluster, ns: str) -> list[dict[str, Any]]:
    return runs(tb, ns, "jobs", "batch/v1")


def audit_status(tb: cluster.Cluster, ns: str) -> dict[str, Any]:
    body = story.get(tb, ns, "brokerclusters", CLUSTER) or {}
    return dict((body.get("status") or {}).get("audit") or {})


def served(tb: cluster.Cluster, path: str) -> bool:
    try:
        tb.admin.get(path)
    except kube_errors.KubeError as exc:
        if exc.status == 404:
            return False
        raise
    return True


def argv_flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_a_due_schedule_creates_one_job(popfleet_release: cluster.Cluster, ns: str) -> None:
    tb = popfleet_release
    assert jobs(tb, ns) == []
    set_audit(tb, ns, {"enabled": True, "schedule": "* * * * *", "master": "local[2]"})
    (job,) = waiting.until(lambda: jobs(tb, ns) or None, timeout_s=150, what="a scheduled Job")
    name = job["metadata"]["name"]
    scheduled = job["metadata"]["annotations"]["popfleet.io/audit-scheduled-at"]
    assert scheduled.endswith(":00Z")  # a cron minute, not the time of the tick
    assert name == f"{CLUSTER}-audit-{int(datetime.datetime.fromisoformat(scheduled).timestamp())}"
    owner = job["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("BrokerCluster", CLUSTER, True)
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == f"{CLUSTER}-audit"
    argv = pod["containers"][0]["command"]
    assert argv[:2] == ["popfleet-audit", "all"] and argv_flag(argv, "--master") == "local[2]"
    bc = story.get(tb, ns, "brokerclusters", CLUSTER)
    assert bc is not None
    admin = [b["adminEndpoint"] for b in bc["status"]["brokers"]]
    assert argv_flag(argv, "--brokers") == ",".join(admin)
    assert (argv_flag(argv, "--namespace"), argv_flag(argv, "--cluster")) == (ns, CLUSTER)
    rbac = "rbac.authorization.k8s.io/v1"
    role = tb.admin.get(kube.ns_path(ns, "roles", f"{CLUSTER}-audit", group=rbac))
    assert {r for rule in role["rules"] for r in rule["resources"]} == {
        "consumergroups",
        "consumergroups/status",
        "events",
    }
    assert tb.admin.get_or_none(kube.ns_path(ns, "rolebindings", f"{CLUSTER}-audit", group=rbac))
    assert tb.admin.get_or_none(kube.ns_path(ns, "serviceaccounts", f"{CLUSTER}-audit"))
    status = waiting.until(
        lambda: ((s := audit_status(tb, ns)).get("lastScheduleTime") == scheduled and s) or None,
        timeout_s=30,
        what="status.audit.lastScheduleTime",
    )
    assert status["backend"] == "job" and status["lastRun"] == name
    # A schedule the CRD pattern lets through but cron refuses: said, nothing started.
    set_audit(tb, ns, {"enabled": True, "schedule": "61 * * * *", "master": "local[2]"})
    invalid = story.wait_condition(
        tb, ns, "brokerclusters", CLUSTER, "AuditHealthy", status="False", reason="InvalidSpec"
    )
    assert "spec.audit.schedule" in story.condition(invalid, "AuditHealthy")["message"]
    # Stop the schedule before the next minute would start another run, and stop this run
    # (the real audit run is the last test's; PySpark is slow on a busy machine).
    set_audit(tb, ns, {"enabled": True, "schedule": "0 0 1 1 *", "master": "local[2]"})
    tb.admin.delete(
        kube.ns_path(ns, "jobs", name, group="batch/v1"), {"propagationPolicy": "Background"}
    )
    waiting.until(lambda: not jobs(tb, ns), timeout_s=60, what="the Job deleted")


def test_with_the_spark_operator_crd_auto_creates_a_spark_application(
    popfleet_release: cluster.Cluster, ns: str
) -> None:
    tb = popfleet_release
    set_audit(tb, ns, {"enabled": True, "schedule": "0 0 1 1 *", "backend": "auto"})
    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    tb.admin.create(crds, spark_crd())
    group = "sparkoperator.k8s.io/v1beta2"
    try:
        waiting.until(
            lambda: served(tb, kube.ns_path(ns, "sparkapplications", group=group)),
            timeout_s=60,
            what="SparkApplications served",
        )
        run_now(tb, ns, "spark-1")
        (app,) = waiting.until(
            lambda: runs(tb, ns, "sparkapplications", group) or None,
            timeout_s=90,
            what="a SparkApplication",
        )
        assert app["metadata"]["annotations"][RUN_NOW] == "spark-1"
        spec = app["spec"]
        assert (spec["type"], spec["mode"]) == ("Python", "cluster")
        assert spec["mainApplicationFile"].endswith("main.py") and spec["arguments"][0] == "all"
        assert spec["driver"]["serviceAccount"] == f"{CLUSTER}-audit"
        assert spec["executor"]["labels"]["popfleet.io/role"] == "audit"
        # The driver's pod rights: the chart's ClusterRole, bound by the operator (bind only).
        path = kube.ns_path(
            ns, "rolebindings", f"{CLUSTER}-audit-spark", group="rbac.authorization.k8s.io/v1"
        )
        role_ref = tb.admin.get(path)["roleRef"]
        assert role_ref["kind"] == "ClusterRole"
        assert role_ref["name"].endswith("-audit-spark-driver")
        status = waiting.until(
            lambda: ((s := audit_status(tb, ns)).get("lastRunNow") == "spark-1" and s) or None,
            timeout_s=30,
            what="run-now recorded",
        )
        assert status["backend"] == "sparkapplication"
        assert status["active"] == app["metadata"]["name"]
    finally:
        tb.admin.delete(f"{crds}/{SPARK_CRD}")
        waiting.until(
            lambda: tb.admin.get_or_none(f"{crds}/{SPARK_CRD}") is None,
            timeout_s=60,
            what="the SparkApplication CRD gone",
        )


def produce_and_pop(tb: cluster.Cluster, ns: str) -> int:
    """PRODUCED messages, some popped and one of them acked: the un-acked count (truth)."""
    (pod,) = story.broker_pods(tb, ns, CLUSTER)
    endpoint = f"{cluster.Cluster.pod_ip(pod)}:8081"
    with officialclient.producer(endpoint, [TOPIC]) as producer:
        for i in range(PRODUCED):
            producer.send(officialclient.message(TOPIC, f"payment {i}".encode()))
    with officialclient.simple_consumer(endpoint, GROUP, TOPIC) as consumer:
        popped = officialclient.receive_until(consumer, 4, invisible_s=INVISIBLE_S, batch=4)
        assert 4 <= len(popped) < PRODUCED, len(popped)
        consumer.ack(popped[0])
    return len(popped) - 1


def offsets_truth(tb: cluster.Cluster, ns: str) -> tuple[int, int]:
    """(message lag, in-flight) of the group as the broker's admin API reports its offsets.

    The admin API sits on the store role and counts in-flight messages from the durable
    revive log, so in-flight equals the un-acked count once every checkpoint is flushed.
    """
    (pod,) = story.broker_pods(tb, ns, CLUSTER)

    async def offsets(admin: BrokerAdmin) -> tuple[int, int]:
        found = await admin.offsets(GROUP, [TOPIC])
        queues = [q for q in found.queues if q.topic == TOPIC]
        lag = sum(q.lag_messages or 0 for q in queues)  # never committed: no lag, as the audit
        return lag, sum(q.in_flight_messages or 0 for q in queues)

    return story.on_broker(pod, offsets)


@pytest.mark.timeout(600)  # PySpark local[2] in a pod on a shared two-core machine
def test_the_job_pod_audits_the_brokers_and_kubectl_shows_lag_and_backlog(
    popfleet_release: cluster.Cluster, ns: str
) -> None:
    tb = popfleet_release
    unacked = produce_and_pop(tb, ns)
    lag, _ = waiting.until(
        lambda: ((found := offsets_truth(tb, ns))[1] == unacked and found) or None,
        timeout_s=60,
        what=f"{unacked} un-acked messages durable in the revive log",
    )
    assert lag > 0
    set_audit(
        tb,
        ns,
        {
            "enabled": True,
            "schedule": "0 0 1 1 *",
            "backend": "job",
            "master": "local[2]",
            "history": {"successfulRunsLimit": 1, "failedRunsLimit": 1},
        },
    )
    run_now(tb, ns, "real-1")
    (job,) = waiting.until(lambda: jobs(tb, ns) or None, timeout_s=60, what="the run-now Job")
    name = job["metadata"]["name"]

    def finished() -> dict[str, Any] | None:
        status = audit_status(tb, ns)
        return status if status.get("lastRun") == name and not status.get("active") else None

    status = waiting.until(finished, timeout_s=480, what=f"audit run {name} finished")
    (pod,) = tb.pods(ns, f"job-name={name}")
    assert status["lastRunState"] == "Succeeded", tb.log(pod)[-3000:]
    assert status["lastRunNow"] == "real-1" and status["lastSuccessfulTime"]
    story.wait_condition(tb, ns, "brokerclusters", CLUSTER, "AuditHealthy", timeout_s=30)
    group = story.get(tb, ns, "consumergroups", GROUP)
    assert group is not None
    audit = group["status"]["audit"]
    assert audit["run"] == name
    assert (audit["lagMessages"], audit["reviveBacklog"]) == (lag, unacked)
    listing = tb.kubectl("get", "cg", GROUP, "-n", ns).splitlines()
    header, row = listing[0].split(), listing[1].split()
    columns = dict(zip(header, row, strict=True))
    assert (columns["LAG"], columns["BACKLOG"]) == (str(lag), str(unacked))
    # History: with successfulRunsLimit 0 the finished run (and its pod) goes; status keeps it.
    audit_spec = {"enabled": True, "schedule": "0 0 1 1 *", "backend": "job", "master": "local[2]"}
    set_audit(tb, ns, {**audit_spec, "history": {"successfulRunsLimit": 0}})
    waiting.until(lambda: not jobs(tb, ns), timeout_s=60, what=f"{name} pruned")
    assert audit_status(tb, ns)["lastRun"] == name
    healthy = story.condition(story.get(tb, ns, "brokerclusters", CLUSTER), "AuditHealthy")
    assert (healthy["status"], healthy["reason"]) == ("True", "AuditSucceeded")
