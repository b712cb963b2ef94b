"""Pure builders: a BrokerCluster's parsed spec in, plain manifest dicts out.

One module per child kind; :func:`children` lists them in apply order (identity and config
first, the StatefulSet last so its pods find everything they mount).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from popfleet_operator.builders import (
    configmaps,
    networkpolicies,
    poddisruptionbudgets,
    replication,
    serviceaccounts,
    services,
    statefulsets,
)
from popfleet_operator.model.specs import ClusterSpec, ObjectRef


def children(
    owner: ObjectRef,
    spec: ClusterSpec,
    *,
    replicas: int,
    partition: int,
    replica_cluster_role: str = "",
    replica_partitions: Sequence[int] = (),
) -> list[dict[str, Any]]:
    """``replicas``: pods per StatefulSet (brokers, planning decides); with
    ``spec.replication`` one StatefulSet per replica index, each with ``replicas`` pods, and
    ``replication.children`` (``replica_cluster_role``: the chart's ClusterRole to bind).
    ``partition`` is ``NAME``'s, ``replica_partitions`` those of ``NAME-r1``, ... (missing:
    0; ``planning.replicarollout``)."""
    config = configmaps.build(owner, spec)
    config_hash = configmaps.content_hash(config)
    extra: list[dict[str, Any]] = []
    if spec.replication.enabled:
        extra = replication.children(owner, brokers=replicas, cluster_role=replica_cluster_role)
    return [
        serviceaccounts.build(owner),
        config,
        services.build_headless(owner),
        services.build_client(owner),
        poddisruptionbudgets.build(owner),
        networkpolicies.build(owner, spec),
        *extra,
        *(
            statefulsets.build(
                owner,
                spec,
                replicas=replicas,
                config_hash=config_hash,
                partition=partition if replica == 0 else _at(replica_partitions, replica - 1),
                replica=replica,
            )
            for replica in range(spec.replication.replicas)
        ),
    ]


def _at(values: Sequence[int], index: int) -> int:
    return values[index] if index < len(values) else 0


def pod_template_hash(owner: ObjectRef, spec: ClusterSpec, replica: int = 0) -> str:
    """The template hash the StatefulSet of ``replica`` built from ``spec`` carries (see
    statefulsets)."""
    config_hash = configmaps.content_hash(configmaps.build(owner, spec))
    return statefulsets.template_hash(
        statefulsets.template(owner, spec, config_hash=config_hash, replica=replica)
    )
