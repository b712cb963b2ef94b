"""A thin JSON-in, JSON-out door to the apiserver, on the official ``kubernetes`` client.

Why: the process kubelet, the provisioner and the fixtures handle Kubernetes objects as plain
dicts (what the API sends), not as the client's generated model classes; ``ApiClient.call_api``
with ``_preload_content=False`` gives exactly that while the official client still does
kubeconfig loading, TLS and client-certificate auth. Errors become ``errors.KubeError``.

Every request has a timeout; only 127.0.0.1 is ever contacted (the kubeconfigs say so). No
answer at all (urllib3 gave up: connection refused while the apiserver restarts, a dropped
connection) is ``errors.NotReadyYet``, retriable, so that pollers and the kubelet's loop wait
for the apiserver instead of dying.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from kubernetes import config as kube_config  # type: ignore[import-untyped]
from kubernetes.client.exceptions import ApiException  # type: ignore[import-untyped]
from urllib3.exceptions import HTTPError

from popfleet_testbed import errors

Obj = dict[str, Any]

STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
JSON = "application/json"


class Kube:
    """One authenticated connection (one identity) to the testbed's apiserver."""

    def __init__(self, kubeconfig: Path, *, timeout_s: float = 15.0) -> None:
        self._api = kube_config.new_client_from_config(config_file=str(kubeconfig))
        self._timeout_s = timeout_s

    def close(self) -> None:
        self._api.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        body: object = None,
        query: Mapping[str, str] | None = None,
        content_type: str = JSON,
    ) -> Obj:
        try:
            resp = self._api.call_api(
                path,
                method,
                query_params=list((query or {}).items()),
                header_params={"Content-Type": content_type, "Accept": JSON},
                body=body,
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _preload_content=False,
                _request_timeout=self._timeout_s,
            )
        except ApiException as exc:
            reason, message = str(exc.reason), ""
            try:
                status_obj = json.loads(exc.body)
                reason = str(status_obj.get("reason", reason))
                message = str(status_obj.get("message", ""))
            except (TypeError, ValueError):
                message = str(exc.body)
            raise errors.KubeError(int(exc.status), reason, message) from None
        except HTTPError as exc:  # not an OSError: urllib3's own, after its retries
            raise errors.NotReadyYet(
                f"{method} {path}: no answer from the apiserver: {exc}"
            ) from None
        data = resp.data
        if not data:
            return {}
        return cast(Obj, json.loads(data))

    def get(self, path: str, query: Mapping[str, str] | None = None) -> Obj:
        return self.request("GET", path, query=query)

    def get_or_none(self, path: str) -> Obj | None:
        try:
            return self.get(path)
        except errors.KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def create(self, path: str, body: Obj) -> Obj:
        return self.request("POST", path, body=body)

    def patch(self, path: str, body: Obj, *, content_type: str = STRATEGIC) -> Obj:
        return self.request("PATCH", path, body=body, content_type=content_type)

    def put(self, path: str, body: Obj) -> Obj:
        return self.request("PUT", path, body=body)

    def delete(self, path: str, body: Obj | None = None) -> Obj | None:
        try:
            return self.request("DELETE", path, body=body)
        except errors.KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def items(self, path: str, query: Mapping[str, str] | None = None) -> list[Obj]:
        return cast(list[Obj], self.get(path, query).get("items", []))


def ns_path(namespace: str, resource: str, name: str = "", *, group: str = "") -> str:
    """API path of a namespaced resource; ``group`` like ``apps/v1`` (core when empty)."""
    base = f"/apis/{group}" if group else "/api/v1"
    path = f"{base}/namespaces/{namespace}/{resource}"
    return f"{path}/{name}" if name else path
