"""Send the audit's status patches and Events to the Kubernetes API (pykube-ng).

Why pykube-ng: the audit's driver is a synchronous Spark program that talks to the API
three times per group at most (list, patch the status, create an Event). The operator's
asyncio client would need an event loop around each call; pykube-ng is a small synchronous
client with custom-object classes, kubeconfig and in-cluster configuration. Each layer has
the client that fits it: kopf and ``kubernetes_asyncio`` in the operator, the official
``kubernetes`` client in the testbed, pykube-ng here
(docs/design/2026-11-21-operator-client.md).

The bodies come from :mod:`popfleet_audit.publishing`; this module only talks. Credentials:
``--kubeconfig`` when given, else ``$KUBECONFIG`` when set (the local testbed gives pods
one), else the pod's service account (in-cluster). The audit Role allows exactly: get/list
ConsumerGroups, patch ``consumergroups/status``, create Events. The status goes in with a
JSON merge patch on the status subresource, so the apiserver merges it and nothing else of
the object is touched. A group whose patch or Event fails is logged; after trying every
group, :class:`PublishError` says how many failed.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import pykube
import requests

from popfleet_audit import publishing
from popfleet_audit.config import AuditConfig
from popfleet_audit.findings import AuditSummary

log = logging.getLogger(__name__)
TIMEOUT_S = 30.0


class PublishError(RuntimeError):
    """Some status patches or Events could not be sent (or the listing failed)."""


class ConsumerGroup(pykube.objects.NamespacedAPIObject):  # type: ignore[misc]
    """``popfleet.io/v1alpha1`` ConsumerGroup, as pykube-ng addresses it."""

    version = f"{publishing.API_GROUP}/{publishing.API_VERSION}"
    endpoint = publishing.PLURAL
    kind = publishing.KIND


def connect(audit: AuditConfig) -> pykube.HTTPClient:
    """A client from ``--kubeconfig``, ``$KUBECONFIG`` or the service account, in that order."""
    if audit.kubeconfig is not None:
        config = pykube.KubeConfig.from_file(str(audit.kubeconfig))
    elif os.environ.get("KUBECONFIG"):
        config = pykube.KubeConfig.from_file(os.environ["KUBECONFIG"])
    else:
        config = pykube.KubeConfig.from_service_account()
    return pykube.HTTPClient(config, timeout=TIMEOUT_S)


def _listing(api: pykube.HTTPClient, namespace: str) -> list[dict[str, Any]]:
    try:
        return [dict(cg.obj) for cg in ConsumerGroup.objects(api, namespace=namespace)]
    except (pykube.exceptions.PyKubeError, requests.RequestException) as exc:
        raise PublishError(f"listing ConsumerGroups in {namespace}: {exc}") from exc


def _send(
    api: pykube.HTTPClient,
    *,
    namespace: str,
    name: str,
    patch: dict[str, Any],
    event: dict[str, Any] | None,
) -> None:
    group = ConsumerGroup(api, {"metadata": {"name": name, "namespace": namespace}})
    group.patch(patch, subresource="status")
    if event is not None:
        pykube.Event(api, event).create()


def publish(audit: AuditConfig, summary: AuditSummary) -> int:
    """Patch every audited ConsumerGroup and emit Events; returns how many were patched."""
    if audit.namespace is None or audit.cluster is None:
        raise PublishError("publishing needs --namespace and --cluster")
    namespace = audit.namespace
    api = connect(audit)
    failures = patched = 0
    try:
        actions = publishing.plan(_listing(api, namespace), audit.cluster, summary)
        for name, patch, event in actions:
            try:
                _send(api, namespace=namespace, name=name, patch=patch, event=event)
            except (pykube.exceptions.PyKubeError, requests.RequestException) as exc:
                failures += 1
                log.error("ConsumerGroup %s/%s: %s", namespace, name, exc)
            else:
                patched += 1
    finally:
        api.session.close()
    if failures:
        raise PublishError(f"{failures} ConsumerGroup(s) could not be patched or reported")
    log.info("patched status.audit of %d ConsumerGroup(s) in %s", patched, namespace)
    return patched
