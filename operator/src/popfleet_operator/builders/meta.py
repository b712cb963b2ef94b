"""Object metadata every child shares: name, namespace, labels, the owner reference."""

from __future__ import annotations

from typing import Any

from popfleet_operator.model import names
from popfleet_operator.model.specs import ObjectRef


def owner_reference(owner: ObjectRef) -> dict[str, Any]:
    """Controller owner reference: children are garbage-collected with their BrokerCluster."""
    return {
        "apiVersion": names.API_VERSION,
        "kind": owner.kind,
        "name": owner.name,
        "uid": owner.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def object_meta(owner: ObjectRef, name: str, *, component: str = "broker") -> dict[str, Any]:
    return {
        "name": name,
        "namespace": owner.namespace,
        "labels": names.labels(owner.name, component),
        "ownerReferences": [owner_reference(owner)],
    }
