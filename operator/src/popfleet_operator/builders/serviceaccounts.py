"""The broker pods' ServiceAccount: an identity with no API token (brokers never call the API)."""

from __future__ import annotations

from typing import Any

from popfleet_operator.builders import meta
from popfleet_operator.model import names
from popfleet_operator.model.specs import ObjectRef


def build(owner: ObjectRef) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": meta.object_meta(owner, names.service_account(owner.name)),
        "automountServiceAccountToken": False,
    }
