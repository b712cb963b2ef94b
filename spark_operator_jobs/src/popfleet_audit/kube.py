"""Send the audit's status patches and Events to the Kubernetes API (kubernetes_asyncio).

The bodies come from :mod:`popfleet_audit.publishing`; this module only talks
(plain JSON over the client's ``call_api``, as the operator does). Credentials:
``--kubeconfig`` when given, else ``$KUBECONFIG`` when set, else the pod's service account
(in-cluster). The
audit Role allows exactly: get/list ConsumerGroups, patch
``consumergroups/status``, create Events. A group whose patch or Event fails is
logged; after trying every group, :class:`PublishError` says how many failed.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any
from urllib.parse import quote

from kubernetes_asyncio import client, config

from popfleet_audit import publishing
from popfleet_audit.config import AuditConfig
from popfleet_audit.findings import AuditSummary

log = logging.getLogger(__name__)
MERGE_PATCH = "application/merge-patch+json"


class PublishError(RuntimeError):
    """Some status patches or Events could not be sent (or the listing failed)."""


async def _api_client(audit: AuditConfig) -> client.ApiClient:
    configuration = client.Configuration()
    if audit.kubeconfig is not None:
        await config.load_kube_config(
            config_file=str(audit.kubeconfig), client_configuration=configuration
        )
    elif os.environ.get("KUBECONFIG"):  # as the operator: the local testbed gives pods one
        await config.load_kube_config(client_configuration=configuration)
    else:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return client.ApiClient(configuration)


async def _call(
    api: client.ApiClient, method: str, url: str, *, body: Any = None, content_type: str
) -> dict[str, Any]:
    response = await api.call_api(
        url,
        method,
        header_params={"Content-Type": content_type, "Accept": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
        _preload_content=False,
        _request_timeout=30,
    )
    try:
        text = await response.text()
        if not 200 <= response.status <= 299:
            raise PublishError(f"{method} {url}: {response.status} {text[:300]}")
        answer: dict[str, Any] = json.loads(text) if text else {}
        return answer
    finally:
        response.release()


def _groups_url(namespace: str, name: str | None = None) -> str:
    base = (
        f"/apis/{publishing.API_GROUP}/{publishing.API_VERSION}"
        f"/namespaces/{quote(namespace)}/{publishing.PLURAL}"
    )
    return f"{base}/{quote(name)}/status" if name else base


async def publish(audit: AuditConfig, summary: AuditSummary) -> int:
    """Patch every audited ConsumerGroup and emit Events; returns how many were patched."""
    if audit.namespace is None or audit.cluster is None:
        raise PublishError("publishing needs --namespace and --cluster")
    namespace = audit.namespace
    api = await _api_client(audit)
    failures = patched = 0
    try:
        listing = await _call(api, "GET", _groups_url(namespace), content_type="application/json")
        actions = publishing.plan(listing.get("items") or [], audit.cluster, summary)
        for name, patch, event in actions:
            try:
                await _call(
                    api, "PATCH", _groups_url(namespace, name), body=patch, content_type=MERGE_PATCH
                )
                patched += 1
                if event is not None:
                    url = f"/api/v1/namespaces/{quote(namespace)}/events"
                    await _call(api, "POST", url, body=event, content_type="application/json")
            except (PublishError, client.ApiException) as exc:
                failures += 1
                log.error("ConsumerGroup %s/%s: %s", namespace, name, exc)
    finally:
        await api.close()
    if failures:
        raise PublishError(f"{failures} ConsumerGroup(s) could not be patched or reported")
    log.info("patched status.audit of %d ConsumerGroup(s) in %s", patched, namespace)
    return patched
