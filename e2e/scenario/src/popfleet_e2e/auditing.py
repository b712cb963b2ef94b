"""The story's audit: enable ``spec.audit`` on the BrokerCluster and let the schedule run it.

The operator owns the schedule (DESIGN §4): with ``backend: job`` it starts a ``batch/v1``
Job named ``<cluster>-audit-<unix seconds>`` running ``popfleet-audit all`` (PySpark, master
``local[2]`` here: driver and executors in the one pod), which writes its findings into each
ConsumerGroup's ``status.audit`` (lag, revive backlog, Burrow-style status). The schedule is
every minute, the tightest cron allows, so the first run starts within a minute of enabling.
"""

from __future__ import annotations

from popfleet_e2e import waits
from popfleet_e2e.access import ClusterAccess, Obj, ScenarioError

SCHEDULE = "* * * * *"
STATUSES = {"OK", "WARN", "STALL", "STOP", "REWIND", "ERR"}


def enable(access: ClusterAccess, cluster: str, *, schedule: str = SCHEDULE) -> None:
    """``spec.audit``: the Job backend (``popfleet-audit`` in a pod), Spark master ``local[2]``."""
    audit = {"enabled": True, "schedule": schedule, "backend": "job", "master": "local[2]"}
    access.merge_patch("brokercluster", cluster, {"spec": {"audit": audit}})


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


def _run_logs(access: ClusterAccess, run: str) -> str:
    try:
        return access.kubectl("logs", f"job/{run}", "-n", access.namespace, "--tail=40")
    except ScenarioError as exc:
        return f"(no log: {exc})"


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


def enabled_every_minute(access: ClusterAccess, *, cluster: str) -> str:
    """Enable audits; runs start on the schedule and overlap the steps that follow."""
    enable(access, cluster)
    return f"spec.audit: schedule '{SCHEDULE}', backend job, master local[2]"


def ran_on_schedule(access: ClusterAccess, *, cluster: str, group: str) -> str:
    """A scheduled run succeeded and wrote the group's findings; then audits are disabled."""
    first_success(access, cluster, timeout_s=420)
    found = findings(access, cluster=cluster, group=group, timeout_s=60)
    access.merge_patch("brokercluster", cluster, {"spec": {"audit": {"enabled": False}}})
    return f"{group}: {summary(found)}; audits disabled again"
