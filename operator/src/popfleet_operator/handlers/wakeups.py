"""The re-apply chain after a broker pod is replaced, in one place.

A broker pod that comes back (new IP, or an empty volume and so a new config epoch) must get
its member list and every Topic, ConsumerGroup and consume mode again, without waiting for
the resync timers. Two annotations turn that into ordinary kopf update events::

    broker pod event (created, deleted, moved, readiness changed)
      -> pod_changed: patch popfleet.io/pods = pods' fingerprint on the BrokerCluster
           (only when it differs: most pod events write nothing)
      -> clusters.changed -> clusters.reconcile: members pushed, children applied,
           status.brokers written; Event BrokerConfigEpochChanged ("re-applying ...")
           for a broker with a new config epoch
      -> poke_dependents: patch popfleet.io/brokers = status.brokers' fingerprint on each
           Topic and ConsumerGroup of the cluster (only when the brokers changed)
      -> topics.changed / groups.changed -> fanning.reconcile: apply + read back on every
           broker; Event Reapplied from fanning.report, which observes the re-apply

A replicated cluster's set Leases wake it the same way (``lease_changed``: annotation
``popfleet.io/leases``) when a leader, term or in-sync set changes, so ``status.replication``
and the ``Degraded`` condition follow a failover or a follower falling out within seconds;
the renewals in between (one a second per set) are dropped in memory.

Both the pod event and any event of the BrokerCluster (``cluster_event``) also invalidate
the cluster's shared view (``clients.clusterviews``), so the rounds they wake read the new
pods and spec rather than a view up to ``POPFLEET_CLUSTER_VIEW_TTL_S`` old.

Each arrow is an update event of the next object, so kopf's retries, the per-object lock and
the progress annotations apply as for any change; the resync timers stay the safety net if
a wake-up is lost (operator restart, a conflict on the patch).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import kopf

from popfleet_operator.clients import kube as kube_client
from popfleet_operator.handlers import runtime
from popfleet_operator.model import names, observations, specs
from popfleet_operator.status import clusters as cluster_status

CLUSTER = "BrokerCluster"
DEPENDENTS = ("Topic", "ConsumerGroup")


@kopf.on.event(
    "",
    "v1",
    "pods",
    labels={names.LABEL_CLUSTER: kopf.PRESENT, names.LABEL_MANAGED_BY: names.OPERATOR_APP},
)
async def pod_changed(*, namespace: str | None, labels: kopf.Labels, memo: Any, **_: Any) -> None:
    """A broker pod came, went, moved, changed readiness or took over its set's lead: wake
    its BrokerCluster now.

    The cluster carries its pods' fingerprint in an annotation; changing it is an update
    event, so the cluster's change handler runs (members pushed, status, dependents poked)
    without waiting for the resync timer. Pod events that change nothing that matters
    (most of them) cost one list and one get, and write nothing.
    """
    rt = runtime.get(memo)
    cluster, ns = labels[names.LABEL_CLUSTER], namespace or ""
    rt.forget_cluster(ns, cluster)
    url = kube_client.path(names.API_VERSION, CLUSTER, namespace=ns, name=cluster)
    body = await rt.kube.get_or_none(url)
    if body is None or body["metadata"].get("deletionTimestamp"):
        return
    pods, serving, by_replica = await kube_client.broker_pod_views(rt.kube, ns, cluster)
    # A replicated set's new leader (another pod serves the broker) wakes the cluster too,
    # and so does any change of a replica pod (its rollout waits for followers).
    followers = [
        p for r, by_ordinal in sorted(by_replica.items()) if r for p in by_ordinal.values()
    ]
    value = cluster_status.pods_fingerprint(
        [*pods, *(p for p in serving if p not in pods), *followers]
    )
    if (body["metadata"].get("annotations") or {}).get(names.PODS) != value:
        await rt.kube.patch_merge(url, {"metadata": {"annotations": {names.PODS: value}}})


@kopf.on.event("coordination.k8s.io", "v1", "leases", labels={names.LABEL_CLUSTER: kopf.PRESENT})
async def lease_changed(
    *,
    type: str | None,  # kopf names the event type so
    body: kopf.Body,
    namespace: str | None,
    labels: kopf.Labels,
    memo: Any,
    **_: Any,
) -> None:
    """A replicated set's Lease changed leader, term or in-sync set: wake its BrokerCluster
    (``popfleet.io/leases`` = the fingerprint of its set Leases). A renewal that changes none
    of those is dropped here without an API call."""
    rt = runtime.get(memo)
    ns = namespace or ""
    key = (ns, str(body["metadata"]["name"]))
    if type == "DELETED":
        rt.leases.pop(key, None)
        return
    lease = observations.set_lease(body)
    if rt.leases.get(key) == lease:
        return
    rt.leases[key] = lease
    cluster = labels[names.LABEL_CLUSTER]
    url = kube_client.path(names.API_VERSION, CLUSTER, namespace=ns, name=cluster)
    found = await rt.kube.get_or_none(url)
    if found is None or found["metadata"].get("deletionTimestamp"):
        return
    value = cluster_status.leases_fingerprint(await kube_client.set_leases(rt.kube, ns, cluster))
    if (found["metadata"].get("annotations") or {}).get(names.LEASES) != value:
        await rt.kube.patch_merge(url, {"metadata": {"annotations": {names.LEASES: value}}})


@kopf.on.event(names.GROUP, names.VERSION, "brokerclusters")
async def cluster_event(*, namespace: str | None, name: str, memo: Any, **_: Any) -> None:
    """A BrokerCluster was created, changed (spec or status) or deleted: drop its view."""
    found = memo.get("runtime")
    if isinstance(found, runtime.Runtime):
        found.forget_cluster(namespace or "", name)


async def poke_dependents(
    rt: runtime.Runtime, body: kopf.Body, entries: Sequence[Mapping[str, Any]]
) -> None:
    """Brokers changed: annotate this cluster's Topics and ConsumerGroups so they re-apply now.

    ``entries`` is the ``status.brokers`` this round wrote (``clusters.report``'s). The
    annotation's value is their fingerprint; a change of it is an update event for kopf, so
    the dependents' change handlers run at once (the resync timer stays the safety net).
    """
    previous = (body.get("status") or {}).get("brokers") or []
    new = cluster_status.fingerprint(entries)
    if new == cluster_status.fingerprint(previous):
        return
    ref = specs.ObjectRef.from_body(CLUSTER, body)
    for kind in DEPENDENTS:
        url = kube_client.path(names.API_VERSION, kind, namespace=ref.namespace)
        for item in await rt.kube.items(url):
            if (item.get("spec") or {}).get("clusterRef", {}).get("name") != ref.name:
                continue
            if item["metadata"].get("deletionTimestamp"):
                continue
            await rt.kube.patch_merge(
                f"{url}/{item['metadata']['name']}",
                {"metadata": {"annotations": {names.BROKERS: new}}},
            )
