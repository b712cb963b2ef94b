"""The leader's pod carries the label ``popfleet.io/leader=true`` (issue 18), so a Service
per broker set that selects it gives clients an address that always reaches the set's
leader: the official clients query routes only every 30 s, retry a failed call on the same
address, and the Node.js producer never takes a new route at all (docs/design/
2026-11-28-replication.md, "What clients see"). The label follows the Lease: only the
holder sets it.

Every round the leader lists its set's pods labelled leader, takes the label off every
other one (a deposed leader that could not take its own off: dead, or cut off from the API
server), then puts it on its own pod. A replica that stops leading takes its own off. Pods
are named by the replica names (the Lease's holder identity is the pod name); the set's
pods are those the label selector it is given matches (``--leader-label-selector``: the
operator's pods carry no per-set label of their own, a StatefulSet's template being the
same for every set, so the selector names the cluster and the pod-index label).
"""

from __future__ import annotations

import logging
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

log = logging.getLogger(__name__)

LEADER_LABEL = "popfleet.io/leader"


class LeaderPodLabel:
    """One replica's side of its set's leader label (module docstring)."""

    def __init__(self, api: client.CoreV1Api, *, namespace: str, set_selector: str, me: str):
        """``set_selector``: a label selector matching the pods of this replica's set."""
        if not set_selector.strip():
            raise ValueError("the leader label needs a selector of the set's pods")
        self._api = api
        self._namespace = namespace
        self._selector = f"{set_selector},{LEADER_LABEL}=true"
        self._me = me

    async def lead(self) -> None:
        """The label on this replica's pod and on no other pod of its set."""
        pods = await self._api.list_namespaced_pod(self._namespace, label_selector=self._selector)
        labelled = {pod.metadata.name for pod in pods.items}
        for name in sorted(labelled - {self._me}):
            log.info("leader label: off %s (%s leads)", name, self._me)
            await self._patch(name, None)
        if self._me not in labelled:
            await self._patch(self._me, "true")

    async def follow(self) -> None:
        """The label off this replica's pod."""
        await self._patch(self._me, None)

    async def _patch(self, pod: str, value: str | None) -> None:
        body: dict[str, Any] = {"metadata": {"labels": {LEADER_LABEL: value}}}
        try:
            await self._api.patch_namespaced_pod(pod, self._namespace, body)
        except ApiException as exc:
            if exc.status != 404:  # a pod gone has no label to take off
                raise
