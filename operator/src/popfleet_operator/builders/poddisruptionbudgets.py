"""At most one broker down by voluntary disruption (drains, node upgrades) at a time."""

from __future__ import annotations

from typing import Any

from popfleet_operator.builders import meta
from popfleet_operator.model import names
from popfleet_operator.model.specs import ObjectRef


def build(owner: ObjectRef) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": meta.object_meta(owner, names.statefulset(owner.name)),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": names.selector_labels(owner.name)},
        },
    }
