"""``spec.replication`` parsed (issue 18; the operator does not act on it yet: branch only)."""

from __future__ import annotations

import pytest

from popfleet_operator.errors import InvalidSpec
from popfleet_operator.model.specs import ReplicationSpec, parse_cluster


def test_no_replication_is_one_pod_per_broker() -> None:
    spec = parse_cluster({"brokers": 3})
    assert spec.replication == ReplicationSpec(replicas=1, mode="SYNC", min_in_sync_replicas=1)
    assert not spec.replication.enabled


def test_a_replicated_cluster() -> None:
    raw = {"brokers": 2, "replication": {"replicas": 3, "mode": "ASYNC", "minInSyncReplicas": 2}}
    replication = parse_cluster(raw).replication
    assert (replication.replicas, replication.mode, replication.min_in_sync_replicas) == (
        3,
        "ASYNC",
        2,
    )
    assert replication.enabled


@pytest.mark.parametrize("min_in_sync", [0, 3])
def test_min_in_sync_outside_the_set_is_refused(min_in_sync: int) -> None:
    raw = {"replication": {"replicas": 2, "minInSyncReplicas": min_in_sync}}
    with pytest.raises(InvalidSpec, match="minInSyncReplicas"):
        parse_cluster(raw)
