"""An audit through a SparkApplication, executed by the real Spark operator (kind only).

Why: the operator creates a kubeflow ``SparkApplication`` (``sparkoperator.k8s.io/v1beta2``)
when that CRD is installed; only a running Spark operator shows that what we create is
something it can execute. The one the Go module proxy serves here is built by
``e2e/kind/sparkoperator/build.sh`` (its v1beta1 CRDs converted to v1) and runs from an image
on our audit image (it calls spark-submit, cluster mode). The step:

1. installs the Spark operator (CRDs server-side, then ``e2e/kind/sparkoperator/
   manifests.yaml``) and waits for it to be available;
2. stops an earlier Job-backend run still going (audits are disabled by then; its Job is
   deleted with its pods, since concurrency Forbid would hold the new run), then switches
   ``spec.audit`` to ``backend: sparkapplication`` (two executors, small requests, history
   limits 1/1) and asks for a run now (the run-now annotation);
3. waits for the SparkApplication to reach ``COMPLETED`` (a ``FAILED`` one fails the step
   with the driver's log) and the BrokerCluster's ``status.audit`` to say it succeeded;
4. checks what ran: the driver pod (``<app>-driver``) and at least two executor pods
   (``<app>-exec-<n>``), seen while it ran (:class:`auditing.PodTally`), all gone after it;
   the group's ``status.audit`` comes from this run;
5. disables audits; the finished runs are within the history limits.
"""

from __future__ import annotations

import time

from popfleet_e2e import auditing, waits
from popfleet_e2e.access import ClusterAccess, Obj, ScenarioError
from popfleet_e2e.steps import CLUSTER, GROUP, Story

OPERATOR_NS = "spark-operator"
RUN_NOW = "popfleet.io/audit-run-now"
SELECTOR = f"app.kubernetes.io/name=popfleet-audit,app.kubernetes.io/instance={CLUSTER}"
SHAPE: Obj = {
    "backend": "sparkapplication",
    "master": auditing.KUBERNETES_MASTER,
    "spark": {"executorInstances": auditing.EXECUTORS, "conf": auditing.SMALL_PODS},
    "history": {"successfulRunsLimit": 1, "failedRunsLimit": 1},
}
YEARLY = "0 0 1 1 *"  # no scheduled run during the step: only the run-now one


def install_operator(access: ClusterAccess) -> str:
    """Step 1: the Spark operator's CRDs and Deployment, available."""
    where = access.spark_operator
    if where is None:
        raise ScenarioError("this cluster has no Spark operator build (e2e/kind/sparkoperator)")
    access.kubectl("apply", "--server-side", "-f", str(where.crds), timeout_s=120)

    def established() -> bool:  # `kubectl wait` fails while the CRD has no conditions yet
        crd = access.get_or_none("crd", "sparkapplications.sparkoperator.k8s.io") or {}
        conditions = (crd.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    waits.until(established, timeout_s=60, what="the SparkApplication CRD Established")
    access.kubectl("apply", "-f", str(where.manifests))
    access.kubectl(
        "rollout", "status", "deployment/spark-operator", "-n", OPERATOR_NS, "--timeout=180s",
        timeout_s=200,
    )  # fmt: skip
    return "spark-operator available"


def unfinished_jobs(access: ClusterAccess) -> list[str]:
    """Audit Jobs of the cluster that have neither completed nor failed (status says so even
    while audits are disabled; ``status.audit.active`` is cleared on disabling)."""
    finished = {"Complete", "Failed"}
    return [
        job["metadata"]["name"]
        for job in access.items("jobs", selector=SELECTOR)
        if not any(
            c.get("type") in finished and c.get("status") == "True"
            for c in (job.get("status") or {}).get("conditions") or []
        )
    ]


def applications(access: ClusterAccess) -> list[Obj]:
    return access.items("sparkapplications", selector=SELECTOR)


def state(app: Obj) -> str:
    return str(((app.get("status") or {}).get("applicationState") or {}).get("state") or "")


def _driver_log(access: ClusterAccess, app: str) -> str:
    try:
        return access.kubectl("logs", f"{app}-driver", "-n", access.namespace, "--tail=40")
    except ScenarioError as exc:
        return f"(no driver log: {exc})"


def ran_through_the_spark_operator(story: Story) -> str:
    """Steps 1-5 of the module docstring."""
    access = story.access
    began = time.monotonic()
    install_operator(access)
    installed = time.monotonic() - began
    # The Job backend's last scheduled run may still be going (concurrency Forbid): audits
    # are disabled by now, so it is stopped (its Job deleted, its pods with it) rather than
    # waited for; the earlier steps have checked what such a run does.
    leftover = unfinished_jobs(access)
    for job in leftover:
        access.kubectl(
            "delete", "job", job, "-n", access.namespace, "--cascade=foreground", "--wait=false"
        )
    waits.until(
        lambda: not unfinished_jobs(access), timeout_s=180, interval_s=1.0,
        what="the earlier audit Jobs gone", seen=lambda: str(unfinished_jobs(access)),
    )  # fmt: skip
    tally = auditing.PodTally(access, CLUSTER).start()
    started = time.monotonic()
    waited = started - began - installed
    try:
        before = {a["metadata"]["name"] for a in applications(access)}
        auditing.enable(access, CLUSTER, schedule=YEARLY, shape=SHAPE)
        access.kubectl(
            "annotate", "brokercluster", CLUSTER, "-n", access.namespace, "--overwrite",
            f"{RUN_NOW}=e2e-{int(time.time())}",
        )  # fmt: skip
        app = waits.until(
            lambda: next((a for a in applications(access) if a["metadata"]["name"] not in before),
                         None),
            timeout_s=90, what="the operator to create a SparkApplication",
            seen=lambda: f"status.audit {auditing.cluster_audit(access, CLUSTER)}",
        )  # fmt: skip
        name = app["metadata"]["name"]

        def finished() -> Obj | None:
            found = access.get_or_none("sparkapplication", name)
            if found is not None and state(found) in ("FAILED", "SUBMISSION_FAILED"):
                raise waits.Fatal(
                    f"SparkApplication {name} {state(found)}: {found.get('status')}\n"
                    f"{_driver_log(access, name)}"
                )
            return found if found is not None and state(found) == "COMPLETED" else None

        waits.until(
            finished, timeout_s=480, interval_s=2.0, what=f"SparkApplication {name} COMPLETED",
            seen=lambda: str((access.get_or_none("sparkapplication", name) or {}).get("status")),
        )  # fmt: skip
        took = time.monotonic() - started
        waits.until(
            lambda: (a := auditing.cluster_audit(access, CLUSTER)).get("lastRun") == name
            and a.get("lastRunState") == "Succeeded",
            timeout_s=90, what=f"status.audit to record {name} as succeeded",
            seen=lambda: str(auditing.cluster_audit(access, CLUSTER)),
        )  # fmt: skip

        def from_this_run() -> Obj | None:
            audit = auditing.group_audit(access, GROUP)
            return audit if audit.get("run") == name else None

        found = waits.until(from_this_run, timeout_s=60, what=f"{GROUP} status.audit from {name}")
    finally:
        access.merge_patch("brokercluster", CLUSTER, {"spec": {"audit": {"enabled": False}}})
        tally.stop()
    driver = f"{name}-driver"
    if tally.seen.get(driver) != "driver":
        raise ScenarioError(f"no driver pod {driver} was seen: {tally.seen}")
    executors = tally.executors_of(name)
    if len(executors) < auditing.EXECUTORS:
        raise ScenarioError(f"{name} ran {len(executors)} executor pod(s): {tally.seen}")
    waits.until(
        lambda: auditing.executors_gone(access, CLUSTER), timeout_s=120,
        what=f"{name}'s executor pods deleted",
    )  # fmt: skip
    kept = len(applications(access))
    if kept > 2:  # successfulRunsLimit + failedRunsLimit
        raise ScenarioError(f"{kept} SparkApplications kept beyond the history limits 1 + 1")
    return (
        f"Spark operator installed in {installed:.0f}s, {len(leftover)} earlier Job(s) "
        f"stopped in {waited:.0f}s; {name} COMPLETED in {took:.0f}s, all recorded and cleaned up "
        f"{time.monotonic() - started - took:.0f}s later: driver {driver}, "
        f"executors {', '.join(executors)}; "
        f"{GROUP}: {auditing.summary(found)}; {kept} run(s) kept"
    )
