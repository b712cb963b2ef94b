"""Ingress to broker pods: the client port (and a replicated set's leader port) from
anywhere, the admin port from the operator and the audit jobs only (any namespace: the
operator usually lives in its own), the replication port from this cluster's broker pods
only, and the roles' /metrics ports from anywhere (Prometheus may run in any namespace)."""

from __future__ import annotations

from typing import Any

from popfleet_operator.builders import meta
from popfleet_operator.model import names
from popfleet_operator.model.specs import ClusterSpec, ObjectRef


def build(owner: ObjectRef, spec: ClusterSpec) -> dict[str, Any]:
    admin_callers = [
        {"namespaceSelector": {}, "podSelector": {"matchLabels": {names.LABEL_NAME: app}}}
        for app in (names.OPERATOR_APP,)
    ] + [
        {"podSelector": {"matchLabels": {names.AUDIT_ROLE_LABEL: "audit"}}},
    ]
    client_ports = [{"port": names.CLIENT_PORT, "protocol": "TCP"}]
    replication: list[dict[str, Any]] = []
    if spec.replication.enabled:
        client_ports.append({"port": names.LEADER_PORT, "protocol": "TCP"})
        peers = [{"podSelector": {"matchLabels": names.selector_labels(owner.name)}}]
        port = {"port": names.REPLICATION_PORT, "protocol": "TCP"}
        replication.append({"from": peers, "ports": [port]})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": meta.object_meta(owner, names.statefulset(owner.name)),
        "spec": {
            "podSelector": {"matchLabels": names.selector_labels(owner.name)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"ports": client_ports},
                {"from": admin_callers, "ports": [{"port": names.ADMIN_PORT, "protocol": "TCP"}]},
                *replication,
                {
                    "ports": [
                        {"port": port, "protocol": "TCP"} for port in names.METRICS_PORTS.values()
                    ]
                },
            ],
        },
    }
