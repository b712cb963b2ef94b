"""What every handler shares: the Kubernetes client, the broker pool, the intervals.

Built once at start-up (``settings.startup``) and kept in kopf's global ``memo``; handlers
reach it with :func:`get`. Also the small steps every reconciler needs: pause/unmanaged
annotations, the admin token, the broker pods, writing status.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import kopf

from popfleet_operator.clients import kube as kube_client
from popfleet_operator.clients.brokers import BrokerPool
from popfleet_operator.errors import KubeError, SecretNotFound
from popfleet_operator.handlers import metrics
from popfleet_operator.model import names
from popfleet_operator.model.observations import BrokerPod, StatefulSetState
from popfleet_operator.model.specs import ClusterSpec
from popfleet_operator.planning import backoff
from popfleet_operator.status import conditions as c

RESYNC_S = float(os.environ.get("POPFLEET_RESYNC_INTERVAL_S", "30"))
ADMIN_TIMEOUT_S = float(os.environ.get("POPFLEET_ADMIN_TIMEOUT_S", "5"))
# How long an updated broker pod may take to be Ready and re-applied before a rolling update
# is reported stuck (the store's startup probe alone allows 300 s).
ROLLOUT_READY_TIMEOUT_S = float(os.environ.get("POPFLEET_ROLLOUT_READY_TIMEOUT_S", "600"))


@dataclass
class Runtime:
    kube: kube_client.Kube
    pool: BrokerPool


def get(memo: Any) -> Runtime:
    runtime = memo.get("runtime")
    if not isinstance(runtime, Runtime):
        raise kopf.TemporaryError("operator still starting", delay=1)
    return runtime


def lock(memo: Any) -> asyncio.Lock:
    """One reconcile at a time per object (a timer and a change handler may overlap)."""
    found = memo.get("lock")
    if not isinstance(found, asyncio.Lock):
        found = asyncio.Lock()
        memo["lock"] = found
    return found


async def reconcile_round(
    kind: str,
    *,
    memo: Any,
    logger: kopf.Logger,
    retry: int | None,
    reconcile: Callable[[], Awaitable[Sequence[c.Condition]]],
) -> None:
    """One reconcile round of any kind: under the object's lock, timed and counted.

    ``retry`` is None for timer ticks, which never raise (the conditions already say what is
    wrong; the next tick tries again). Change handlers re-raise ``PermanentError`` and turn an
    apiserver failure or a ``Degraded`` outcome into ``TemporaryError`` with back-off.
    """
    with metrics.timed(kind):
        async with lock(memo):
            try:
                conditions = await reconcile()
            except kopf.PermanentError:
                metrics.RECONCILES.labels(kind, "failed").inc()
                if retry is None:
                    return
                raise
            except KubeError as exc:
                metrics.RECONCILES.labels(kind, "retry").inc()
                if retry is None:
                    logger.warning("resync: %s", exc.message)
                    return
                raise kopf.TemporaryError(exc.message, delay=backoff.delay_s(retry)) from exc
    degraded = next((x for x in conditions if x.type == c.DEGRADED and x.status), None)
    metrics.RECONCILES.labels(kind, "degraded" if degraded else "ok").inc()
    if degraded is not None and retry is not None:
        raise kopf.TemporaryError(degraded.message, delay=backoff.delay_s(retry))


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def annotation(body: Mapping[str, Any], key: str) -> str:
    return str((body.get("metadata", {}).get("annotations") or {}).get(key, "")).lower()


def paused(body: Mapping[str, Any]) -> bool:
    return annotation(body, names.PAUSED) == "true"


def unmanaged(body: Mapping[str, Any]) -> bool:
    return annotation(body, names.MANAGED) == "false"


def write_status(
    patch: Any,
    body: Mapping[str, Any],
    updates: Sequence[c.Condition],
    **fields: Any,
) -> None:
    """Put ``fields`` and the merged conditions into kopf's status patch."""
    status = body.get("status") or {}
    generation = int(body["metadata"].get("generation", 0))
    for key, value in fields.items():
        patch.status[key] = value
    patch.status["observedGeneration"] = generation
    patch.status["conditions"] = c.merge(
        status.get("conditions") or [], updates, now=now(), generation=generation
    )


async def admin_token(kube: kube_client.Kube, namespace: str, spec: ClusterSpec) -> str | None:
    if spec.admin_token is None:
        return None
    url = kube_client.path("v1", "Secret", namespace, spec.admin_token.name)
    try:
        secret = await kube.request("GET", url)
    except KubeError as exc:
        if exc.status == 404:
            raise SecretNotFound(
                f"spec.auth.adminTokenSecret: Secret {spec.admin_token.name!r} not found"
            ) from exc
        raise
    value = (secret.get("data") or {}).get(spec.admin_token.key)
    if value is None:
        raise SecretNotFound(
            f"spec.auth.adminTokenSecret: Secret {spec.admin_token.name!r} "
            f"has no key {spec.admin_token.key!r}"
        )
    return base64.b64decode(value).decode().strip()


# Container waiting reasons of a pod that is still starting normally. popack and revive exit
# until the store's socket exists, so a young pod shows a CrashLoopBackOff or two: only
# CRASH_LOOP_RESTARTS restarts of one container make it a problem.
_STARTING = frozenset({"ContainerCreating", "PodInitializing"})
CRASH_LOOP_RESTARTS = 3


def _problem(status: Mapping[str, Any]) -> str:
    """The first container that cannot run (image, config, crash loop), "" when none."""
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        reason = str(waiting.get("reason") or "")
        restarts = int(container.get("restartCount") or 0)
        if not reason or reason in _STARTING:
            continue
        if reason == "CrashLoopBackOff" and restarts < CRASH_LOOP_RESTARTS:
            continue
        detail = f"{restarts} restarts" if reason == "CrashLoopBackOff" else ""
        detail = detail or str(waiting.get("message") or "")[:200]
        return f"{container.get('name')}: {reason}" + (f" ({detail})" if detail else "")
    return ""


def _timestamp_s(value: object) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def broker_pod(cluster: str, pod: Mapping[str, Any]) -> BrokerPod | None:
    meta = pod["metadata"]
    name = str(meta["name"])
    ordinal = names.ordinal(cluster, name)
    if ordinal is None:
        return None
    status = pod.get("status") or {}
    conditions = status.get("conditions") or []
    return BrokerPod(
        name=name,
        ordinal=ordinal,
        pod_ip=status.get("podIP") or None,
        ready=any(x.get("type") == "Ready" and x.get("status") == "True" for x in conditions),
        terminating=bool(meta.get("deletionTimestamp")),
        revision=str((meta.get("labels") or {}).get(names.LABEL_REVISION, "")),
        created_s=_timestamp_s(meta.get("creationTimestamp")),
        problem=_problem(status),
    )


def statefulset_state(sts: Mapping[str, Any] | None) -> StatefulSetState | None:
    """The broker StatefulSet's replicas, partition, revisions and template hash."""
    if sts is None:
        return None
    meta, spec, status = sts["metadata"], sts.get("spec") or {}, sts.get("status") or {}
    rolling = (spec.get("updateStrategy") or {}).get("rollingUpdate") or {}
    return StatefulSetState(
        replicas=int(spec.get("replicas", 1)),
        partition=int(rolling.get("partition") or 0),
        generation=int(meta.get("generation") or 0),
        observed_generation=int(status.get("observedGeneration") or 0),
        current_revision=str(status.get("currentRevision") or ""),
        update_revision=str(status.get("updateRevision") or ""),
        template_hash=str((meta.get("annotations") or {}).get(names.TEMPLATE_HASH, "")),
    )


async def broker_pods(kube: kube_client.Kube, namespace: str, cluster: str) -> list[BrokerPod]:
    raw = await kube.items(
        kube_client.path("v1", "Pod", namespace), label_selector=names.pod_selector(cluster)
    )
    pods = [p for p in (broker_pod(cluster, r) for r in raw) if p is not None]
    return sorted(pods, key=lambda p: p.ordinal)


def epoch_changes(
    previous: Sequence[Mapping[str, Any]], current: Mapping[str, str]
) -> list[tuple[str, str, str]]:
    """(broker, old epoch, new epoch) for brokers whose config epoch changed since last time."""
    before = {str(b.get("name")): str(b.get("configEpoch", "")) for b in previous}
    return [
        (broker, before[broker], epoch)
        for broker, epoch in sorted(current.items())
        if epoch and before.get(broker) and before[broker] != epoch
    ]
