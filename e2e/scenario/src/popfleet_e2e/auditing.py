"""The story's audit: enable ``spec.audit`` on the BrokerCluster and let the schedule run it.

The operator owns the schedule (DESIGN §4): with ``backend: job`` it starts a ``batch/v1``
Job named ``<cluster>-audit-<unix seconds>`` running the audit, which writes its findings
into each ConsumerGroup's ``status.audit`` (lag, revive backlog, Burrow-style status). The
schedule is every minute, the tightest cron allows, so the first run starts within a minute
of enabling. Two shapes:

* ``LOCAL`` (the testbed, ``make demo``): ``popfleet-audit all --master local[2]``, driver
  and executors in the Job's one pod;
* ``KUBERNETES`` (kind): ``spark-submit --master k8s://https://kubernetes.default.svc`` in
  client mode, the driver in the Job's pod and two **executor pods** Spark creates from the
  audit image (one data-source partition per broker and revive queue, read in parallel).
  :class:`PodTally` records every audit pod it sees meanwhile, so the step can say how many
  executors ran and that they were cleaned up.
"""

from __future__ import annotations

import re
import subprocess
import threading
from dataclasses import dataclass, field

from popfleet_e2e import waits
from popfleet_e2e.access import ClusterAccess, Obj, ScenarioError

SCHEDULE = "* * * * *"
STATUSES = {"OK", "WARN", "STALL", "STOP", "REWIND", "ERR"}
EXECUTORS = 2
KUBERNETES_MASTER = "k8s://https://kubernetes.default.svc"
# Small requests: a kind node has 2 CPUs for everything (Spark's own request settings).
SMALL_PODS = {
    "spark.kubernetes.driver.request.cores": "200m",
    "spark.kubernetes.executor.request.cores": "200m",
}
LOCAL: Obj = {"backend": "job", "master": "local[2]"}
KUBERNETES: Obj = {
    "backend": "job",
    "master": KUBERNETES_MASTER,
    "spark": {"executorInstances": EXECUTORS, "conf": SMALL_PODS},
}


def enable(
    access: ClusterAccess, cluster: str, *, schedule: str = SCHEDULE, shape: Obj = LOCAL
) -> None:
    """``spec.audit`` enabled on ``schedule`` with the backend and master of ``shape``."""
    audit = {"enabled": True, "schedule": schedule, **shape}
    access.merge_patch("brokercluster", cluster, {"spec": {"audit": audit}})


COLUMNS = "NAME:.metadata.name,ROLE:.metadata.labels.spark-role"


@dataclass
class PodTally:
    """Every audit pod of ``cluster`` seen while runs go (one ``kubectl get --watch``, not a
    listing a second: kubectl is costly to start): name -> its ``spark-role`` label
    ("driver", "executor", or "" for a Job pod)."""

    access: ClusterAccess
    cluster: str
    seen: dict[str, str] = field(default_factory=dict)
    _watch: subprocess.Popen[str] | None = None
    _thread: threading.Thread | None = None

    def _read(self, watch: subprocess.Popen[str]) -> None:
        assert watch.stdout is not None
        for line in watch.stdout:
            name, _, role = line.strip().partition(" ")
            if name:
                role = role.strip()
                self.seen.setdefault(name, "" if role == "<none>" else role)

    def start(self) -> PodTally:
        selector = (
            f"app.kubernetes.io/name=popfleet-audit,app.kubernetes.io/instance={self.cluster}"
        )
        self._watch = self.access.kubectl_stream(
            "get", "pods", "-n", self.access.namespace, "-l", selector, "--watch",
            "--no-headers", "-o", f"custom-columns={COLUMNS}",
        )  # fmt: skip
        self._thread = threading.Thread(
            target=self._read, args=(self._watch,), name="audit-pods", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.terminate()
            try:
                self._watch.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._watch.kill()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def executors(self) -> list[str]:
        return sorted(name for name, role in self.seen.items() if role == "executor")

    def executors_of(self, run: str) -> list[str]:
        """Executor pods of one run (Spark names them ``<podNamePrefix>-exec-<n>``)."""
        return [name for name in self.executors() if name.startswith(f"{run}-exec-")]


def summary(audit: Obj) -> str:
    """One line of a group's ``status.audit`` for people."""
    return (
        f"{audit.get('status')}: lag {audit.get('lagMessages')} messages "
        f"({audit.get('timeLagMs')} ms), revive backlog {audit.get('reviveBacklog')}, "
        f"in flight {audit.get('inFlightMessages')}, run {audit.get('run')} "
        f"at {audit.get('auditedAt')}"
    )


def cluster_audit(access: ClusterAccess, cluster: str) -> Obj:
    return dict((access.get("brokercluster", cluster).get("status") or {}).get("audit") or {})


def group_audit(access: ClusterAccess, group: str) -> Obj:
    return dict((access.get("consumergroup", group).get("status") or {}).get("audit") or {})


def _run_logs(access: ClusterAccess, run: str, *, tail: int = 40) -> str:
    try:
        return access.kubectl("logs", f"job/{run}", "-n", access.namespace, f"--tail={tail}")
    except ScenarioError as exc:
        return f"(no log: {exc})"


REVIVE_RATE = re.compile(r"revive backlog audit read (\d+ records .*records/s\))")


def revive_rate(access: ClusterAccess, run: str) -> str:
    """What the run's driver says it read: records, revive queues, brokers, seconds, rate."""
    found = REVIVE_RATE.search(_run_logs(access, run, tail=400))
    return found.group(1) if found else "no revive read rate in the driver's log"


def first_success(access: ClusterAccess, cluster: str, *, timeout_s: float) -> Obj:
    """Wait until a scheduled run has succeeded; the cluster's ``status.audit`` then.

    A failed run is not the end (one may overlap a broker pod being replaced): the schedule
    starts another. The logs of failed runs are quoted if no run succeeds in time.
    """
    failed: dict[str, str] = {}

    def succeeded() -> Obj | None:
        audit = cluster_audit(access, cluster)
        run = str(audit.get("lastRun") or "")
        if audit.get("lastRunState") == "Failed" and run not in failed:
            failed[run] = _run_logs(access, run)
        return audit if audit.get("lastSuccessfulTime") and audit.get("lastScheduleTime") else None

    return waits.until(
        succeeded, timeout_s=timeout_s, what=f"a scheduled audit of {cluster} to succeed",
        seen=lambda: f"status.audit {cluster_audit(access, cluster)}; failed runs {failed}",
    )  # fmt: skip


def findings(access: ClusterAccess, *, cluster: str, group: str, timeout_s: float) -> Obj:
    """The group's ``status.audit`` from a run: lag and backlog as numbers, a known status."""

    def written() -> Obj | None:
        audit = group_audit(access, group)
        return audit if str(audit.get("run", "")).startswith(f"{cluster}-audit-") else None

    audit = waits.until(
        written, timeout_s=timeout_s, what=f"{group} status.audit from an audit run",
        seen=lambda: f"status.audit {group_audit(access, group)}",
    )  # fmt: skip
    numbers = (audit.get("lagMessages"), audit.get("reviveBacklog"))
    if not all(isinstance(n, int) and n >= 0 for n in numbers) or audit["status"] not in STATUSES:
        raise ScenarioError(f"{group} status.audit is not a finding: {audit}")
    return audit


def enabled_every_minute(access: ClusterAccess, *, cluster: str, shape: Obj = LOCAL) -> str:
    """Enable audits; runs start on the schedule and overlap the steps that follow."""
    enable(access, cluster, shape=shape)
    executors = (shape.get("spark") or {}).get("executorInstances")
    pods = f", {executors} executor pods" if shape["master"] == KUBERNETES_MASTER else ""
    backend, master = shape["backend"], shape["master"]
    return f"spec.audit: schedule '{SCHEDULE}', backend {backend}, master {master}{pods}"


def executors_gone(access: ClusterAccess, cluster: str) -> bool:
    selector = (
        f"app.kubernetes.io/name=popfleet-audit,app.kubernetes.io/instance={cluster},"
        "spark-role=executor"
    )
    return not access.items("pods", selector=selector)


def ran_with_executors(access: ClusterAccess, *, cluster: str, group: str, tally: PodTally) -> str:
    """A scheduled k8s:// run succeeded with ``EXECUTORS`` executor pods and wrote the group's
    findings; its executors are gone afterwards; audits are disabled again."""
    first_success(access, cluster, timeout_s=480)
    found = findings(access, cluster=cluster, group=group, timeout_s=60)
    access.merge_patch("brokercluster", cluster, {"spec": {"audit": {"enabled": False}}})
    executors = tally.executors_of(str(found["run"]))
    if len(executors) < EXECUTORS:
        raise ScenarioError(
            f"a k8s:// audit ran with {len(executors)} executor pod(s), want {EXECUTORS}: "
            f"seen {tally.seen}"
        )
    waits.until(
        lambda: executors_gone(access, cluster), timeout_s=120,
        what="the audits' executor pods deleted with their drivers",
    )  # fmt: skip
    return (
        f"{group}: {summary(found)}; {len(executors)} executor pods ({', '.join(executors)}), "
        f"all gone after the run; revive read: {revive_rate(access, str(found['run']))}; "
        "audits disabled again"
    )


def ran_on_schedule(access: ClusterAccess, *, cluster: str, group: str) -> str:
    """A scheduled run succeeded and wrote the group's findings; then audits are disabled."""
    first_success(access, cluster, timeout_s=420)
    found = findings(access, cluster=cluster, group=group, timeout_s=60)
    access.merge_patch("brokercluster", cluster, {"spec": {"audit": {"enabled": False}}})
    return f"{group}: {summary(found)}; audits disabled again"
