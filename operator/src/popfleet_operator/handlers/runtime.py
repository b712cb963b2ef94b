"""What every handler shares: Kubernetes client, broker pool, cluster views, intervals.

Built once at start-up (``settings.startup``) and kept in kopf's global ``memo``; handlers
reach it with :func:`get`. Also what every reconciler's round needs around its steps: the
per-object lock, :func:`reconcile_round` (timing, counting, error translation) and
:func:`write_status` (kopf's status patch, only what changed). The pure helpers live in
``model.switches``, ``model.observations`` and ``status.epochs``; the reads of pods and
Secrets in ``clients.kube``, the shared cluster reads in ``clients.clusterviews``.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import kopf

from popfleet_operator.clients import clusterviews
from popfleet_operator.clients import kube as kube_client
from popfleet_operator.clients.brokers import BrokerPool
from popfleet_operator.clients.slots import PrioritySlots
from popfleet_operator.errors import OperatorError
from popfleet_operator.handlers import metrics
from popfleet_operator.model.observations import SetLease
from popfleet_operator.planning import backoff
from popfleet_operator.planning.silence import BrokerSilence
from popfleet_operator.status import conditions as c

# The chart's ClusterRole a replicated cluster's broker ServiceAccount is bound to (Leases,
# pod labels): builders.replication.
BROKER_REPLICA_CLUSTER_ROLE = os.environ.get("POPFLEET_BROKER_REPLICA_CLUSTERROLE", "")
RESYNC_S = float(os.environ.get("POPFLEET_RESYNC_INTERVAL_S", "60"))
ADMIN_TIMEOUT_S = float(os.environ.get("POPFLEET_ADMIN_TIMEOUT_S", "5"))
# How long an updated broker pod may take to be Ready and re-applied before a rolling update
# is reported stuck (the store's startup probe alone allows 300 s).
ROLLOUT_READY_TIMEOUT_S = float(os.environ.get("POPFLEET_ROLLOUT_READY_TIMEOUT_S", "600"))
# How long a leader asked to hand over (a replicated cluster's rollout) waits for its
# successor to catch up before it refuses and takes writes again.
HAND_OVER_TIMEOUT_MS = int(os.environ.get("POPFLEET_HAND_OVER_TIMEOUT_MS", "10000"))
# How long a Topic or ConsumerGroup round reuses its BrokerCluster's spec, token and pods
# (``clients.clusterviews``); cluster and pod events invalidate sooner.
CLUSTER_VIEW_TTL_S = float(os.environ.get("POPFLEET_CLUSTER_VIEW_TTL_S", "2"))
# Concurrency (docs/operations.md "Tuning concurrency"): Topic and ConsumerGroup rounds
# talking to brokers at once (the rest wait for a slot), and admin calls under way per
# broker (``clients.brokers``).
ROUND_LIMIT = int(os.environ.get("POPFLEET_ROUND_LIMIT", "16"))
BROKER_CALL_LIMIT = int(os.environ.get("POPFLEET_BROKER_CALL_LIMIT", "8"))
# How often a Topic or ConsumerGroup whose status says all is well is read back from every
# broker even when nothing changed (``handlers.fanning``; spread over objects by uid).
VERIFY_INTERVAL_S = float(os.environ.get("POPFLEET_VERIFY_INTERVAL_S", "900"))
# How long a resync of a converged object waits before reporting a silent broker as
# unreachable (``planning.silence``: slow is not gone); change rounds report at once.
UNREACHABLE_AFTER_S = float(os.environ.get("POPFLEET_UNREACHABLE_AFTER_S", "30"))


@dataclass
class Runtime:
    kube: kube_client.Kube
    pool: BrokerPool
    views: clusterviews.ClusterViews[clusterviews.ClusterView | None] = field(init=False)
    epochs: clusterviews.ClusterViews[dict[str, str]] = field(init=False)
    rounds: PrioritySlots = field(init=False)
    silence: BrokerSilence = field(init=False)
    # Each set Lease as last seen by ``wakeups.lease_changed`` ((namespace, name) -> it):
    # renewals that change nothing status shows are dropped there without an API call.
    leases: dict[tuple[str, str], SetLease] = field(default_factory=dict)

    def __post_init__(self) -> None:
        load = functools.partial(clusterviews.load, self.kube)
        self.views = clusterviews.ClusterViews(load, ttl_s=CLUSTER_VIEW_TTL_S)
        self.epochs = clusterviews.ClusterViews(self._config_epochs, ttl_s=CLUSTER_VIEW_TTL_S)
        self.rounds = PrioritySlots(ROUND_LIMIT)
        self.silence = BrokerSilence(grace_s=UNREACHABLE_AFTER_S)

    async def _config_epochs(self, namespace: str, cluster: str) -> dict[str, str]:
        return await clusterviews.config_epochs(
            namespace, cluster, views=self.views, pool=self.pool
        )

    def forget_cluster(self, namespace: str, cluster: str) -> None:
        """The cluster or one of its pods changed: its next rounds read everything afresh."""
        self.views.invalidate(namespace, cluster)
        self.epochs.invalidate(namespace, cluster)


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


async def close_idle(memo: Any) -> None:
    """Close the broker channels no round has used for the pool's ``idle_s``.

    Pods that were replaced or scaled away leave a channel to an IP nobody dials again;
    without this the operator would keep one per pod IP it ever saw. Runs at the start of
    every reconcile round (a channel a round is about to use was just marked used by it).
    """
    found = memo.get("runtime")
    if isinstance(found, Runtime):
        await found.pool.close_idle()


STATUS_WRITES = "status_writes"  # per-object memo: rounds of this process that patched status
STALE_SNAPSHOT = "the status changed while this round waited; running again on the new one"
STALE_RETRY_S = 1.0


async def reconcile_round(
    kind: str,
    *,
    memo: Any,
    patch: kopf.Patch,
    logger: kopf.Logger,
    retry: int | None,
    reconcile: Callable[[], Awaitable[Sequence[c.Condition]]],
) -> None:
    """One reconcile round of any kind: under the object's lock, timed and counted.

    A change handler's body is the snapshot of the event that caused it, while a timer's is
    live. When another round of the object patched its status while a change round waited
    for the object's lock (a tick waiting for a round slot holds it), the snapshot no longer
    says what the status is: the round would take a condition for true that is false by now
    (and not tell a recovery: no ``AllBrokersConfirmed`` Event) and skip writes it believes
    unneeded. Such a round raises ``TemporaryError`` and runs again a second later, with the
    status kopf has by then, without doing anything.

    ``retry`` is None for timer ticks, which never raise (the conditions already say what is
    wrong; the next tick tries again). Change handlers re-raise ``PermanentError``, turn a
    retriable ``OperatorError`` (an apiserver failure that may pass: 5xx, 409, 429, no
    answer; a Secret that may appear) or a ``Degraded`` outcome into ``TemporaryError`` with
    back-off, and any other ``OperatorError`` (the API refused for good: 403, 404, 422 ...)
    into ``PermanentError`` naming its reason: retrying at once would only repeat it, and
    the resync timer re-checks anyway.
    """
    writes_before = memo.get(STATUS_WRITES, 0)
    await close_idle(memo)
    with metrics.timed(kind):
        async with lock(memo):
            if retry is not None and memo.get(STATUS_WRITES, 0) != writes_before:
                raise kopf.TemporaryError(STALE_SNAPSHOT, delay=STALE_RETRY_S)
            try:
                conditions = await reconcile()
            except kopf.PermanentError:
                metrics.RECONCILES.labels(kind, "failed").inc()
                if retry is None:
                    return
                raise
            except OperatorError as exc:
                metrics.RECONCILES.labels(kind, "retry" if exc.retriable else "failed").inc()
                if retry is None:
                    logger.warning("resync: %s", exc.message)
                    return
                if not exc.retriable:
                    raise kopf.PermanentError(f"{exc.reason}: {exc.message}") from exc
                raise kopf.TemporaryError(exc.message, delay=backoff.delay_s(retry)) from exc
            finally:
                if patch.status:
                    memo[STATUS_WRITES] = memo.get(STATUS_WRITES, 0) + 1
    degraded = next((x for x in conditions if x.type == c.DEGRADED and x.status), None)
    metrics.RECONCILES.labels(kind, "degraded" if degraded else "ok").inc()
    if degraded is not None and retry is not None:
        raise kopf.TemporaryError(degraded.message, delay=backoff.delay_s(retry))


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_status(
    patch: Any,
    body: Mapping[str, Any],
    updates: Sequence[c.Condition],
    **fields: Any,
) -> None:
    """Put ``fields``, ``observedGeneration`` and the merged conditions into kopf's status
    patch, each only when it differs from ``body.status``.

    A round that changes nothing (the usual resync tick) thus leaves the patch empty and
    kopf sends no PATCH: ``conditions.merge`` keeps each transition time unless the status
    flips, so an unchanged round merges to the list already there. A field given as None is
    removed when present and left out when absent.
    """
    status = body.get("status") or {}
    generation = int(body["metadata"].get("generation", 0))
    merged = c.merge(status.get("conditions") or [], updates, now=now(), generation=generation)
    wanted = {**fields, "observedGeneration": generation, "conditions": merged}
    meta = body["metadata"]
    metrics.conditions((str(body.get("kind")), meta.get("namespace", ""), meta["name"]), merged)
    for key, value in wanted.items():
        if status.get(key) != value:
            patch.status[key] = value
