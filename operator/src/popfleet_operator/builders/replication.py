"""What a replicated BrokerCluster (``spec.replication.replicas`` > 1) adds to its children.

Set ``i`` is the pods ``NAME-i``, ``NAME-r1-i``, ... (one per replica StatefulSet, see
``statefulsets``); its stores elect a leader through the Lease ``NAME-i`` and the leader
labels its own pod ``popfleet.io/leader=true``. So:

* a **Service per set**, ``NAME-i``, selects the set's pods (the StatefulSet controller's
  ``apps.kubernetes.io/pod-index`` label) that carry the leader label, on popfront's leader
  port (open only while the pod's store leads). Routes name ``NAME-i.<ns>.svc:8081``
  (``--client-endpoint``), so a client's address outlives any one leader;
* the brokers' ServiceAccount is **bound** to the chart's ClusterRole for replicas (Leases
  and pod labels in this namespace; ``POPFLEET_BROKER_REPLICA_CLUSTERROLE``); the operator
  may bind that role and never holds its rights;
* a **Lease per set**, ``NAME-i``, as a skeleton (name, labels, owner reference; no spec):
  the stores create, take and renew it, and would make it themselves if it were missing;
  the operator's part is only its ownership, so deleting the BrokerCluster deletes the
  Leases too (server-side apply merges the owner reference into a Lease the stores made);
* the **replication token** (the Secret ``NAME-replication``, key ``token``) authenticates
  followers to their leader. It is made once, at random, by the handler (never applied:
  applying would rotate it on every round; see ``handlers.clusters``).
"""

from __future__ import annotations

import base64
import secrets
from typing import Any

from popfleet_operator.builders import meta
from popfleet_operator.model import names
from popfleet_operator.model.specs import ObjectRef

TOKEN_BYTES = 32


def set_service(owner: ObjectRef, ordinal: int) -> dict[str, Any]:
    selector = {
        **names.selector_labels(owner.name),
        names.LABEL_POD_INDEX: str(ordinal),
        names.LABEL_LEADER: "true",
    }
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta.object_meta(owner, names.set_service(owner.name, ordinal)),
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [
                {
                    "name": "client",
                    "port": names.CLIENT_PORT,
                    "targetPort": "leader",
                    "protocol": "TCP",
                }
            ],
        },
    }


def lease(owner: ObjectRef, ordinal: int) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": meta.object_meta(owner, names.set_service(owner.name, ordinal)),
    }


def role_binding(owner: ObjectRef, cluster_role: str) -> dict[str, Any]:
    name = names.service_account(owner.name)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": meta.object_meta(owner, name),
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": cluster_role,
        },
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": owner.namespace}],
    }


def token_secret(owner: ObjectRef) -> dict[str, Any]:
    """A new random token: created once when missing, never applied over (module doc)."""
    token = secrets.token_urlsafe(TOKEN_BYTES).encode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta.object_meta(owner, names.replication_secret(owner.name)),
        "type": "Opaque",
        "data": {"token": base64.b64encode(token).decode()},
    }


def children(owner: ObjectRef, *, brokers: int, cluster_role: str) -> list[dict[str, Any]]:
    """The brokers' RoleBinding, the per-set Leases and Services, in apply order. No
    ClusterRole (the chart's ``rbac.create=false``): whoever manages RBAC binds one
    (docs/operations)."""
    binding = [role_binding(owner, cluster_role)] if cluster_role else []
    sets = range(brokers)
    return [*binding, *(lease(owner, i) for i in sets), *(set_service(owner, i) for i in sets)]
