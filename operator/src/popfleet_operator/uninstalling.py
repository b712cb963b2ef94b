"""``python -m popfleet_operator.uninstalling``: the chart's pre-delete hook.

Why: every BrokerCluster, Topic and ConsumerGroup carries the operator's finalizer. Once
``helm uninstall`` has removed the operator, nothing would remove those finalizers, so the
objects (and a CRD deleted with ``crds.keep=false``) would hang in Terminating. The hook runs
while the operator still runs and lets it finalize everything it manages, as numbered steps:

1. delete every ConsumerGroup, then every Topic, in the watched namespaces (all namespaces
   when ``$POPFLEET_NAMESPACES`` is empty), and wait until they are gone: the operator
   honours each ``deletionPolicy`` (Retain leaves the brokers alone; Delete removes the
   topic/group on the brokers, and waits while a backlog remains);
2. delete every BrokerCluster with foreground propagation and wait until they are gone:
   the garbage collector removes the children first (StatefulSet and its pods, Services,
   ConfigMap, PDB, ServiceAccount, NetworkPolicy). The brokers' PersistentVolumeClaims stay,
   by the StatefulSet's retention policy (``whenDeleted: Retain``): a BrokerCluster of the
   same name re-created later finds its data again;
3. past ``$POPFLEET_CLEANUP_TIMEOUT_S`` (default 240) exit 1 naming each object left, its
   finalizers and its ``Ready`` condition (e.g. ``DeletionBlocked`` and the backlog), so
   that ``helm uninstall`` fails and the operator keeps running until that is resolved.

Nothing here removes a finalizer itself: that would skip the operator's deletion policies.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol
from urllib.parse import quote

from popfleet_operator.clients import kube as kube_client
from popfleet_operator.errors import KubeError
from popfleet_operator.model import names

log = logging.getLogger("popfleet_operator.uninstalling")
Obj = dict[str, Any]

# Deleted in this order: groups and topics need their cluster's brokers to honour Delete.
STAGES: tuple[tuple[str, ...], ...] = (("consumergroups", "topics"), ("brokerclusters",))
KINDS = {"consumergroups": "ConsumerGroup", "topics": "Topic", "brokerclusters": "BrokerCluster"}
POLL_S = 1.0


class KubeCalls(Protocol):
    """The two calls of ``clients.kube.Kube`` this hook makes (unit tests pass a fake)."""

    async def items(self, url: str, *, label_selector: str = "") -> list[Obj]: ...

    async def request(
        self,
        method: str,
        url: str,
        *,
        body: Obj | None = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Obj: ...


def collection_urls(plural: str, namespaces: Sequence[str]) -> list[str]:
    base = f"/apis/{names.API_VERSION}"
    if not namespaces:
        return [f"{base}/{plural}"]
    return [f"{base}/namespaces/{quote(ns)}/{plural}" for ns in namespaces]


def object_url(plural: str, obj: Mapping[str, Any]) -> str:
    meta = obj["metadata"]
    return (
        f"/apis/{names.API_VERSION}/namespaces/{quote(meta['namespace'])}/{plural}/"
        f"{quote(meta['name'])}"
    )


def describe(plural: str, obj: Mapping[str, Any]) -> str:
    """One leftover object: kind, namespace/name, finalizers, its Ready condition."""
    meta = obj["metadata"]
    where = f"{KINDS.get(plural, plural)} {meta['namespace']}/{meta['name']}"
    finalizers = ", ".join(meta.get("finalizers") or []) or "none"
    conditions = (obj.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    said = ""
    if ready:
        said = f"; Ready={ready.get('status')} {ready.get('reason')}: {ready.get('message')}"
    return f"{where} (finalizers: {finalizers}{said})"


async def listed(kube: KubeCalls, plural: str, namespaces: Sequence[str]) -> list[Obj]:
    found: list[Obj] = []
    for url in collection_urls(plural, namespaces):
        try:
            found += await kube.items(url)
        except KubeError as exc:
            if exc.status != 404:  # a watched namespace that does not exist holds nothing
                raise
    return found


async def delete_all(kube: KubeCalls, plural: str, objs: Sequence[Obj]) -> None:
    """DELETE each object (foreground for BrokerClusters: children go first); 404 is done."""
    query = {"propagationPolicy": "Foreground"} if plural == "brokerclusters" else None
    for obj in objs:
        if obj["metadata"].get("deletionTimestamp"):
            continue
        log.info("deleting %s", describe(plural, obj))
        try:
            await kube.request("DELETE", object_url(plural, obj), query=query)
        except KubeError as exc:
            if exc.status != 404:
                raise


async def remaining(
    kube: KubeCalls, plurals: Sequence[str], namespaces: Sequence[str]
) -> list[str]:
    return [
        describe(plural, obj)
        for plural in plurals
        for obj in await listed(kube, plural, namespaces)
    ]


async def clean_up(kube: KubeCalls, *, namespaces: Sequence[str], timeout_s: float) -> list[str]:
    """Steps 1-2 of the module docstring; returns what is left at the deadline ([] = done)."""
    deadline = time.monotonic() + timeout_s
    for plurals in STAGES:
        for plural in plurals:
            await delete_all(kube, plural, await listed(kube, plural, namespaces))
        while left := await remaining(kube, plurals, namespaces):
            if time.monotonic() >= deadline:
                return left
            log.info("waiting for the operator to finalize %d: %s", len(left), "; ".join(left))
            await asyncio.sleep(POLL_S)
    return []


async def run(namespaces: Sequence[str], timeout_s: float) -> int:
    kube = await kube_client.Kube.connect()
    try:
        left = await clean_up(kube, namespaces=namespaces, timeout_s=timeout_s)
    finally:
        await kube.close()
    if left:
        log.error(
            "still there after %.0f s (is the operator running? does a backlog block a "
            "deletionPolicy Delete?): %s",
            timeout_s,
            "; ".join(left),
        )
        return 1
    log.info("every BrokerCluster, Topic and ConsumerGroup is gone; the release can go")
    return 0


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    namespaces = [n for n in os.environ.get("POPFLEET_NAMESPACES", "").split(",") if n]
    timeout_s = float(os.environ.get("POPFLEET_CLEANUP_TIMEOUT_S", "240"))
    return asyncio.run(run(namespaces, timeout_s))


if __name__ == "__main__":
    sys.exit(main())
