"""Pure builders: a BrokerCluster's parsed spec in, plain manifest dicts out.

One module per child kind; :func:`children` lists them in apply order (identity and config
first, the StatefulSet last so its pods find everything they mount).
"""

from __future__ import annotations

from typing import Any

from popfleet_operator.builders import (
    configmaps,
    networkpolicies,
    poddisruptionbudgets,
    serviceaccounts,
    services,
    statefulsets,
)
from popfleet_operator.model.specs import ClusterSpec, ObjectRef


def children(
    owner: ObjectRef, spec: ClusterSpec, *, replicas: int, partition: int
) -> list[dict[str, Any]]:
    config = configmaps.build(owner, spec)
    return [
        serviceaccounts.build(owner),
        config,
        services.build_headless(owner),
        services.build_client(owner),
        poddisruptionbudgets.build(owner),
        networkpolicies.build(owner),
        statefulsets.build(
            owner,
            spec,
            replicas=replicas,
            config_hash=configmaps.content_hash(config),
            partition=partition,
        ),
    ]


def pod_template_hash(owner: ObjectRef, spec: ClusterSpec) -> str:
    """The template hash the StatefulSet built from ``spec`` carries (see statefulsets)."""
    config_hash = configmaps.content_hash(configmaps.build(owner, spec))
    return statefulsets.template_hash(statefulsets.template(owner, spec, config_hash=config_hash))
