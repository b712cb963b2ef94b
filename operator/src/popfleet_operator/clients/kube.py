"""The operator's Kubernetes client for child objects (kubernetes_asyncio, JSON in and out).

kopf watches and patches the popfleet CRs itself; this module does the rest: server-side
apply of children (field manager ``popfleet-operator``, conflicts forced: the operator owns
what it declares), listing broker pods, reading the admin token Secret and the BrokerCluster
a Topic or ConsumerGroup refers to. Bodies are plain dicts; errors become
:class:`~popfleet_operator.errors.KubeError` with the HTTP status, and so do calls that got
no answer (a timeout, a refused or dropped connection: status 0, retriable), so that they
reach ``handlers.runtime.reconcile_round`` as a retry with back-off, never as a traceback.

Configuration: ``$KUBECONFIG`` when set (the local testbed gives every pod one), otherwise
the in-cluster service account. See docs/design/2026-11-21-operator-client.md for why this
library.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import aiohttp
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client.exceptions import ApiException

from popfleet_operator.errors import KubeError, SecretNotFound
from popfleet_operator.model import names
from popfleet_operator.model.observations import (
    BrokerPod,
    SetLease,
    broker_pod,
    replica_pods,
    serving_pods,
    set_lease,
)
from popfleet_operator.model.specs import ClusterSpec

Obj = dict[str, Any]

# What a call that got no (complete) answer raises: aiohttp's client errors (refused, reset,
# server disconnected, its own timeouts), asyncio's timeout (the builtin TimeoutError) and
# the OS's socket errors.
NO_ANSWER = (aiohttp.ClientError, TimeoutError, OSError)

# apiVersion, kind -> URL plural, for the kinds the operator manages.
PLURALS = {
    ("v1", "ServiceAccount"): "serviceaccounts",
    ("v1", "ConfigMap"): "configmaps",
    ("v1", "Service"): "services",
    ("v1", "Pod"): "pods",
    ("v1", "Secret"): "secrets",
    ("apps/v1", "StatefulSet"): "statefulsets",
    ("policy/v1", "PodDisruptionBudget"): "poddisruptionbudgets",
    ("networking.k8s.io/v1", "NetworkPolicy"): "networkpolicies",
    ("batch/v1", "Job"): "jobs",
    ("rbac.authorization.k8s.io/v1", "Role"): "roles",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "rolebindings",
    ("coordination.k8s.io/v1", "Lease"): "leases",
    ("sparkoperator.k8s.io/v1beta2", "SparkApplication"): "sparkapplications",
    (names.API_VERSION, "BrokerCluster"): "brokerclusters",
    (names.API_VERSION, "Topic"): "topics",
    (names.API_VERSION, "ConsumerGroup"): "consumergroups",
}


def no_answer(method: str, url: str, exc: BaseException) -> KubeError:
    """A call that got no answer, as a retriable ``KubeError`` (status 0) naming what happened."""
    what = type(exc).__name__ + (f": {exc}" if str(exc) else "")
    return KubeError(f"{method} {url}: no answer ({what})", status=0)


def path(api_version: str, kind: str, *, namespace: str, name: str | None = None) -> str:
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    url = f"{base}/namespaces/{quote(namespace)}/{PLURALS[(api_version, kind)]}"
    return f"{url}/{quote(name)}" if name else url


class Kube:
    """JSON calls on one ``ApiClient``: :meth:`connect` first, :meth:`close` last."""

    def __init__(self, api: Any) -> None:
        self._api = api

    @classmethod
    async def connect(cls) -> Kube:
        configuration = k8s_client.Configuration()
        if os.environ.get("KUBECONFIG"):
            await k8s_config.load_kube_config(client_configuration=configuration)
        else:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        return cls(k8s_client.ApiClient(configuration))

    async def close(self) -> None:
        await self._api.close()

    async def request(
        self,
        method: str,
        url: str,
        *,
        body: Obj | None = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Obj:
        try:
            response = await self._api.call_api(
                url,
                method,
                query_params=list((query or {}).items()),
                header_params={"Content-Type": content_type, "Accept": "application/json"},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=30,
            )
        except ApiException as exc:
            raise KubeError(
                f"{method} {url}: {exc.status} {exc.reason}", status=exc.status
            ) from exc
        except NO_ANSWER as exc:
            raise no_answer(method, url, exc) from exc
        try:
            text = await response.text()
        except NO_ANSWER as exc:
            raise no_answer(method, url, exc) from exc
        finally:
            response.release()
        if not 200 <= response.status <= 299:
            raise KubeError(
                f"{method} {url}: {response.status} {text[:500]}", status=response.status
            )
        return json.loads(text) if text else {}

    async def get_or_none(self, url: str) -> Obj | None:
        try:
            return await self.request("GET", url)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def items(self, url: str, *, label_selector: str = "") -> list[Obj]:
        query = {"labelSelector": label_selector} if label_selector else None
        listing = await self.request("GET", url, query=query)
        return list(listing.get("items") or [])

    async def apply(self, obj: Obj) -> Obj:
        """Server-side apply ``obj`` (create or update; the operator's fields win)."""
        meta = obj["metadata"]
        url = path(obj["apiVersion"], obj["kind"], namespace=meta["namespace"], name=meta["name"])
        return await self.request(
            "PATCH",
            url,
            body=obj,
            query={"fieldManager": names.FIELD_MANAGER, "force": "true"},
            content_type="application/apply-patch+yaml",
        )

    async def patch_merge(self, url: str, patch: Obj) -> Obj:
        return await self.request(
            "PATCH", url, body=patch, content_type="application/merge-patch+json"
        )

    async def delete(self, url: str) -> None:
        try:
            await self.request("DELETE", url)
        except KubeError as exc:
            if exc.status != 404:
                raise


# ---------------------------------------------------------------- what the reconcilers read


async def admin_token(kube: Kube, namespace: str, spec: ClusterSpec) -> str | None:
    """The brokers' admin token from ``spec.auth.adminTokenSecret`` (None: no auth)."""
    if spec.admin_token is None:
        return None
    url = path("v1", "Secret", namespace=namespace, name=spec.admin_token.name)
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


async def set_leases(kube: Kube, namespace: str, cluster: str) -> list[SetLease]:
    """A replicated cluster's set Leases (label ``popfleet.io/cluster``)."""
    raw = await kube.items(
        path("coordination.k8s.io/v1", "Lease", namespace=namespace),
        label_selector=f"{names.LABEL_CLUSTER}={cluster}",
    )
    return [set_lease(r) for r in raw]  # status orders them by the declared sets


async def broker_pod_views(
    kube: Kube, namespace: str, cluster: str
) -> tuple[list[BrokerPod], list[BrokerPod], dict[int, dict[int, BrokerPod]]]:
    """One list of the cluster's pods, seen three times: the pods of StatefulSet ``NAME``
    (what scaling and rollouts read), the pod serving each broker (``serving_pods``: what
    admin calls go to; the same pods unless the cluster is replicated), and every pod by
    replica index and ordinal (``replica_pods``: a replicated cluster's rollout)."""
    raw = await kube.items(
        path("v1", "Pod", namespace=namespace), label_selector=names.pod_selector(cluster)
    )
    pods = [p for p in (broker_pod(cluster, r) for r in raw) if p is not None]
    by_replica = replica_pods(cluster, raw)
    return sorted(pods, key=lambda p: p.ordinal), serving_pods(cluster, raw), by_replica
