"""BrokerCluster audits: the operator's cron loop for ``spec.audit`` (the edge).

A kopf timer ticks every ``POPFLEET_AUDIT_INTERVAL_S`` (default: the resync interval, at most
10 s) on every BrokerCluster and runs these steps:

1. ``read``: the cluster fresh from the API (the timer's body may lag behind);
2. ``parse``: ``spec.audit`` and its cron schedule, or ``AuditHealthy=False/InvalidSpec``;
3. ``choose_backend``: is the kubeflow SparkApplication CRD (v1beta2) installed and
   established, and so which backend runs?
4. ``observe_runs``: this cluster's runs (Jobs, and SparkApplications when the CRD exists);
5. ``plan_runs``: due time, run-now, Forbid, history limits (``planning.auditschedule``);
6. ``prune``: delete finished runs beyond the limits (background propagation: pods go too);
7. ``start_due``: the audit identity (ServiceAccount, Role, RoleBinding), then the run
   itself, with the admin endpoints of the ready brokers from ``status.brokers``;
8. ``report``: Events for outcomes, then ``status.audit`` and ``AuditHealthy`` through
   ``patch_audit_status``: its own merge patch (not kopf's) with the read resourceVersion
   as precondition, so that a concurrent cluster reconcile is never overwritten (a conflict
   is retried once, then left to the next tick). Starts get their Event in step 7.

Runs are owned (controller reference) by the BrokerCluster, so they are garbage-collected
with it. ``POPFLEET_AUDIT_SPARK_CLUSTERROLE`` names the chart's spark-driver ClusterRole that
runs with a Kubernetes master are bound to (empty: none is bound).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import kopf

from popfleet_operator import errors
from popfleet_operator.builders import audits as audit_builders
from popfleet_operator.clients import kube as kube_client
from popfleet_operator.handlers import metrics, runtime
from popfleet_operator.model import names, specs
from popfleet_operator.planning import auditschedule as schedule
from popfleet_operator.status import audits as audit_status
from popfleet_operator.status import conditions as c

log = logging.getLogger(__name__)

KIND = "BrokerCluster"
TICK_S = float(os.environ.get("POPFLEET_AUDIT_INTERVAL_S", str(min(runtime.RESYNC_S, 10.0))))
SPARK_CLUSTER_ROLE = os.environ.get("POPFLEET_AUDIT_SPARK_CLUSTERROLE", "")
SPARK_CRD = (
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/sparkapplications.sparkoperator.k8s.io"
)
RUN_KINDS = {
    schedule.JOB: ("batch/v1", "Job"),
    schedule.SPARK_APPLICATION: (audit_builders.SPARK_API_VERSION, "SparkApplication"),
}
API_VERSIONS = {kind_name: api_version for api_version, kind_name in RUN_KINDS.values()}


async def spark_operator_installed(kube: kube_client.Kube) -> bool:
    crd = await kube.get_or_none(SPARK_CRD)
    if crd is None:
        return False
    served = any(
        v.get("name") == "v1beta2" and v.get("served") for v in crd["spec"].get("versions") or []
    )
    conditions = (crd.get("status") or {}).get("conditions") or []
    return served and c.is_true(conditions, "Established")


async def observe_runs(
    kube: kube_client.Kube, ref: specs.ObjectRef, *, spark_installed: bool
) -> tuple[list[schedule.Run], dict[str, str]]:
    """This cluster's runs, and the kind of each (by name) for deleting them."""
    backends = [schedule.JOB] + ([schedule.SPARK_APPLICATION] if spark_installed else [])
    runs: list[schedule.Run] = []
    kinds: dict[str, str] = {}
    for backend in backends:
        api_version, kind = RUN_KINDS[backend]
        read = (
            audit_status.run_from_job
            if backend == schedule.JOB
            else audit_status.run_from_spark_application
        )
        url = kube_client.path(api_version, kind, namespace=ref.namespace)
        for item in await kube.items(url, label_selector=names.audit_selector(ref.name)):
            run = read(item)
            if run is not None:
                runs.append(run)
                kinds[run.name] = kind
    return runs, kinds


async def prune(
    kube: kube_client.Kube, ref: specs.ObjectRef, *, kinds: Mapping[str, str], doomed: Sequence[str]
) -> None:
    for name in doomed:
        kind = kinds[name]
        url = kube_client.path(API_VERSIONS[kind], kind, namespace=ref.namespace, name=name)
        try:
            await kube.request("DELETE", url, body={"propagationPolicy": "Background"})
        except errors.KubeError as exc:
            if exc.status != 404:
                raise


def ready_admin_endpoints(status: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(
        str(b["adminEndpoint"])
        for b in status.get("brokers") or []
        if b.get("ready") and b.get("adminEndpoint")
    )


async def start(
    kube: kube_client.Kube,
    ref: specs.ObjectRef,
    *,
    spec: specs.AuditSpec,
    backend: str,
    run: audit_builders.RunInputs,
) -> None:
    """Identity first (the pod must find its ServiceAccount), then the run (409: it exists)."""
    spark_role = SPARK_CLUSTER_ROLE if (backend != schedule.JOB or spec.kubernetes_master) else ""
    for obj in audit_builders.identity(ref, spark_role or None):
        await kube.apply(obj)
    if backend == schedule.JOB:
        manifest = audit_builders.job(ref, spec, run)
    else:
        manifest = audit_builders.spark_application(ref, spec, run)
    url = kube_client.path(manifest["apiVersion"], manifest["kind"], namespace=ref.namespace)
    try:
        await kube.request("POST", url, body=manifest)
    except errors.KubeError as exc:
        if exc.status != 409:
            raise


async def start_due(
    kube: kube_client.Kube,
    body: kopf.Body,
    ref: specs.ObjectRef,
    *,
    plan: schedule.Plan,
    spec: specs.AuditSpec,
    backend: str,
    status: Mapping[str, Any],
    admin_token: specs.SecretKeyRef | None,
    run_now: str,
) -> tuple[schedule.Plan, str | None]:
    """Step 7: start the planned run (the plan says why not when no broker is ready yet)."""
    start_at = plan.start
    if start_at is None:
        return plan, None
    brokers = ready_admin_endpoints(status)
    if not brokers:
        return dataclasses.replace(plan, waiting="no ready broker with an admin endpoint yet"), None
    run = audit_builders.RunInputs(
        name=names.audit_run(ref.name, int(start_at.timestamp())),
        scheduled_at=audit_status.timestamp(start_at),
        brokers=brokers,
        admin_token=admin_token,
        run_now=run_now if plan.manual else "",
    )
    await start(kube, ref, spec=spec, backend=backend, run=run)
    message = f"{backend} {run.name} started ({len(brokers)} brokers)"
    kopf.event(body, type="Normal", reason="AuditStarted", message=message)
    return plan, run.name


Compute = Callable[[Mapping[str, Any]], tuple[dict[str, Any], c.Condition]]

# The cluster handlers write the same status; past this many conflicts in a row the next
# tick writes it (what a run records is read back from the run itself, see audit_status).
CONFLICT_ATTEMPTS = 4


async def patch_audit_status(
    kube: kube_client.Kube, ref: specs.ObjectRef, compute: Compute
) -> Mapping[str, Any] | None:
    """Patch ``status.audit`` and ``AuditHealthy`` against the latest object.

    ``compute(previous_audit) -> (audit, condition)``. Keys of the old ``status.audit`` that
    the new one lacks are removed (merge-patch ``null``); conditions are only sent when
    ``AuditHealthy`` changes, so other conditions are never written from a stale copy.
    """
    url = kube_client.path(names.API_VERSION, KIND, namespace=ref.namespace, name=ref.name)
    for _attempt in range(CONFLICT_ATTEMPTS):
        fresh = await kube.get_or_none(url)
        if fresh is None:
            return None
        status = fresh.get("status") or {}
        previous = status.get("audit") or {}
        audit, condition = compute(previous)
        patch: dict[str, Any] = {
            "metadata": {"resourceVersion": fresh["metadata"]["resourceVersion"]}
        }
        if audit != previous:
            patch["status"] = {"audit": {**{k: None for k in previous if k not in audit}, **audit}}
        old = c.find(status.get("conditions") or [], audit_status.AUDIT_HEALTHY) or {}
        if (old.get("status"), old.get("reason"), old.get("message")) != (
            condition.status_text,
            condition.reason,
            condition.message,
        ):
            merged = c.merge(
                status.get("conditions") or [],
                [condition],
                now=runtime.now(),
                generation=int(fresh["metadata"].get("generation", 0)),
            )
            patch.setdefault("status", {})["conditions"] = merged
        written = {"type": condition.type, "status": condition.status_text}
        metrics.conditions((KIND, ref.namespace, ref.name), [written])
        if "status" not in patch:
            return fresh
        try:
            return await kube.patch_merge(f"{url}/status", patch)
        except errors.KubeError as exc:
            if exc.status != 409:
                raise
    return None


def _events(body: kopf.Body, previous: Mapping[str, Any], runs: Sequence[schedule.Run]) -> None:
    """An Event when the run status last showed as running has finished."""
    was = previous.get("lastRun")
    if previous.get("lastRunState") != schedule.RunState.ACTIVE.value:
        return
    for run in runs:
        if run.name != was or run.state is schedule.RunState.ACTIVE:
            continue
        if run.state is schedule.RunState.SUCCEEDED:
            kopf.event(
                body,
                type="Normal",
                reason=audit_status.AUDIT_SUCCEEDED,
                message=f"audit run {run.name} succeeded",
            )
        else:
            kopf.warn(
                body,
                reason=audit_status.AUDIT_FAILED,
                message=f"audit run {run.name} failed: {run.message}",
            )


async def read(kube: kube_client.Kube, body: kopf.Body) -> dict[str, Any] | None:
    """Step 1: the cluster fresh from the API; None when it is gone or going."""
    ref = specs.ObjectRef.from_body(KIND, body)
    fresh = await kube.get_or_none(
        kube_client.path(names.API_VERSION, KIND, namespace=ref.namespace, name=ref.name)
    )
    if fresh is None or fresh["metadata"].get("deletionTimestamp"):
        return None
    return fresh


def parse(fresh: Mapping[str, Any]) -> tuple[specs.AuditSpec, specs.ClusterSpec]:
    """Step 2: ``spec.audit`` with a valid schedule, and the cluster spec (or InvalidSpec)."""
    spec = specs.parse_audit(fresh.get("spec") or {})
    schedule.check(spec.schedule)
    return spec, specs.parse_cluster(fresh.get("spec") or {})


async def choose_backend(kube: kube_client.Kube, spec: specs.AuditSpec) -> tuple[str | None, bool]:
    """Step 3: the backend to run (None: the one asked for is missing) and whether the
    SparkApplication CRD is installed."""
    installed = await spark_operator_installed(kube)
    return schedule.backend(spec.backend, spark_operator_installed=installed), installed


@dataclasses.dataclass(frozen=True, slots=True)
class Planned:
    """Step 5's answer and what it was computed from that the report repeats."""

    plan: schedule.Plan
    enabled_at: str
    run_now: str


def plan_runs(
    fresh: Mapping[str, Any],
    spec: specs.AuditSpec,
    *,
    runs: Sequence[schedule.Run],
    now: datetime.datetime,
) -> Planned:
    """Step 5: due time since the last schedule (or since audits were enabled), run-now,
    Forbid and the history limits."""
    previous = (fresh.get("status") or {}).get("audit") or {}
    enabled_at = str(previous.get("enabledAt") or audit_status.timestamp(now))
    since_text = max(str(previous.get("lastScheduleTime") or ""), enabled_at)
    since = audit_status.parse_time(since_text) or now
    run_now = str((fresh["metadata"].get("annotations") or {}).get(names.AUDIT_RUN_NOW, ""))
    plan = schedule.plan(
        schedule=spec.schedule,
        now=now,
        since=since,
        runs=runs,
        run_now=schedule.run_now_requested(
            run_now, last_honoured=str(previous.get("lastRunNow", "")), runs=runs
        ),
        successful_runs_limit=spec.history.successful_runs_limit,
        failed_runs_limit=spec.history.failed_runs_limit,
    )
    return Planned(plan=plan, enabled_at=enabled_at, run_now=run_now)


async def report(
    kube: kube_client.Kube,
    body: kopf.Body,
    ref: specs.ObjectRef,
    *,
    previous: Mapping[str, Any],
    kept: Sequence[schedule.Run],
    planned: Planned,
    started: str | None,
    backend: str,
) -> None:
    """Step 8: Events for finished runs, then ``status.audit`` and ``AuditHealthy``."""
    _events(body, previous, kept)

    def compute(old: Mapping[str, Any]) -> tuple[dict[str, Any], c.Condition]:
        audit = audit_status.audit_status(
            old,
            runs=kept,
            plan=planned.plan,
            started=started,
            backend=backend,
            enabled_at=planned.enabled_at,
            run_now=planned.run_now,
        )
        return audit, audit_status.healthy(kept, old)

    await patch_audit_status(kube, ref, compute)


async def tick(kube: kube_client.Kube, body: kopf.Body, now: datetime.datetime) -> None:
    """One pass of steps 1-8 for one BrokerCluster."""
    fresh = await read(kube, body)
    if fresh is None:
        return
    ref = specs.ObjectRef.from_body(KIND, fresh)
    status = fresh.get("status") or {}
    previous = status.get("audit") or {}
    try:
        spec, cluster_spec = parse(fresh)
    except errors.InvalidSpec as exc:
        problem = c.Condition(audit_status.AUDIT_HEALTHY, False, exc.reason, exc.message)
        await patch_audit_status(kube, ref, lambda old: (dict(old), problem))
        return
    if not spec.enabled:
        if previous.get("enabledAt"):
            await patch_audit_status(
                kube,
                ref,
                lambda old: (audit_status.disabled(old), audit_status.disabled_condition()),
            )
        return
    backend, installed = await choose_backend(kube, spec)
    if backend is None:
        problem = c.Condition(
            audit_status.AUDIT_HEALTHY,
            False,
            audit_status.BACKEND_MISSING,
            "spec.audit.backend is sparkapplication but the SparkApplication CRD "
            "(sparkoperator.k8s.io/v1beta2) is not installed",
        )
        await patch_audit_status(kube, ref, lambda old: (dict(old), problem))
        return
    runs, kinds = await observe_runs(kube, ref, spark_installed=installed)
    planned = plan_runs(fresh, spec, runs=runs, now=now)
    await prune(kube, ref, kinds=kinds, doomed=planned.plan.prune)
    kept = [r for r in runs if r.name not in planned.plan.prune]
    plan, started = await start_due(
        kube, body, ref, plan=planned.plan, spec=spec, backend=backend, status=status,
        admin_token=cluster_spec.admin_token, run_now=planned.run_now,
    )  # fmt: skip
    await report(
        kube,
        body,
        ref,
        previous=previous,
        kept=kept,
        planned=dataclasses.replace(planned, plan=plan),
        started=started,
        backend=backend,
    )


@kopf.timer(names.GROUP, names.VERSION, "brokerclusters", id="audits", interval=TICK_S, idle=None)
async def audits(*, body: kopf.Body, memo: Any, logger: kopf.Logger, **_: Any) -> None:
    """The audit tick; never raises (the next tick retries), logs what went wrong."""
    spec_audit = (body.get("spec") or {}).get("audit") or {}
    was = ((body.get("status") or {}).get("audit") or {}).get("enabledAt")
    if not spec_audit.get("enabled") and not was:
        return  # audits off and already reported so: no API call at all
    rt = runtime.get(memo)
    try:
        await tick(rt.kube, body, datetime.datetime.now(datetime.UTC))
    except errors.KubeError as exc:
        logger.warning("audits: %s", exc.message)
