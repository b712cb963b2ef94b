"""Services: a headless one for stable pod identities and a client entry point.

The headless Service publishes not-ready addresses so a broker that is starting is still
reachable by its peers' routes. Neither is ever dialled by the operator (pod IPs only).
"""

from __future__ import annotations

from typing import Any

from popfleet_operator.builders import meta
from popfleet_operator.model import names
from popfleet_operator.model.specs import ObjectRef

PORTS = [
    {"name": "client", "port": names.CLIENT_PORT, "targetPort": "client", "protocol": "TCP"},
    {"name": "admin", "port": names.ADMIN_PORT, "targetPort": "admin", "protocol": "TCP"},
]


def build_headless(owner: ObjectRef) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta.object_meta(owner, names.headless_service(owner.name)),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": names.selector_labels(owner.name),
            "ports": PORTS,
        },
    }


def build_client(owner: ObjectRef) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta.object_meta(owner, names.client_service(owner.name)),
        "spec": {
            "type": "ClusterIP",
            "selector": names.selector_labels(owner.name),
            "ports": [PORTS[0]],
        },
    }
