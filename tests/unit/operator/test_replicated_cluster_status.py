"""BrokerCluster status of a replicated cluster: each set's leader, term and in-sync
replicas from its Lease, and Degraded (UnderReplicated) when a set has no leader or
replicas out of sync."""

from __future__ import annotations

from popfleet_operator.model.observations import SetLease, set_lease
from popfleet_operator.status import clusters
from popfleet_operator.status import conditions as c

SETS = ["demo-0", "demo-1"]


def lease(broker: str, leader: str, *in_sync: str, term: int = 4) -> SetLease:
    return SetLease(broker, leader, term, tuple(sorted(in_sync)))


def test_a_lease_as_the_stores_write_it() -> None:
    raw = {
        "metadata": {
            "name": "demo-1",
            "annotations": {"popfleet.io/term": "7", "popfleet.io/in-sync": "demo-r1-1,demo-1"},
        },
        "spec": {"holderIdentity": "demo-r1-1"},
    }
    assert set_lease(raw) == SetLease("demo-1", "demo-r1-1", 7, ("demo-1", "demo-r1-1"))
    skeleton = {"metadata": {"name": "demo-0"}, "spec": {}}  # the operator's, not taken yet
    assert set_lease(skeleton) == SetLease("demo-0", "", 0, ())


def test_status_lists_each_declared_set() -> None:
    leases = [
        lease("demo-1", "demo-r2-1", "demo-1", "demo-r1-1", "demo-r2-1"),
        lease("demo-0", "demo-0", "demo-0", "demo-r1-0"),
        lease("demo-7", "demo-7", "demo-7"),  # a set no longer declared
    ]
    assert clusters.replication_entries(leases, expected=SETS) == [
        {
            "broker": "demo-0",
            "leader": "demo-0",
            "term": 4,
            "inSync": "demo-0,demo-r1-0",
            "inSyncReplicas": 2,
        },
        {
            "broker": "demo-1",
            "leader": "demo-r2-1",
            "term": 4,
            "inSync": "demo-1,demo-r1-1,demo-r2-1",
            "inSyncReplicas": 3,
        },
    ]


def test_under_replicated_names_each_set_and_says_when_writes_are_refused() -> None:
    full = [lease(s, s, s, f"{s[:4]}-r1-{s[-1]}", f"{s[:4]}-r2-{s[-1]}") for s in SETS]
    assert clusters.under_replicated(full, expected=SETS, replicas=3, min_in_sync=2) == ""
    short = [lease("demo-0", "demo-0", "demo-0", "demo-r1-0"), lease("demo-1", "demo-1", "demo-1")]
    assert clusters.under_replicated(short, expected=SETS, replicas=3, min_in_sync=2) == (
        "demo-0: 2/3 in sync, demo-1: 1/3 in sync; writes refused"
    )
    leaderless = [lease("demo-0", "", "demo-0")]
    assert clusters.under_replicated(leaderless, expected=SETS, replicas=3, min_in_sync=1) == (
        "demo-0: no leader, demo-1: no leader"
    )


def test_under_replication_degrades_the_cluster_last() -> None:
    conditions = clusters.cluster_conditions(
        [], desired=0, replicas=0, replication="demo-0: 1/3 in sync"
    )
    degraded = next(x for x in conditions if x.type == c.DEGRADED)
    assert (degraded.status, degraded.reason) == (True, c.UNDER_REPLICATED)
    stuck = clusters.cluster_conditions(
        [], desired=0, replicas=0, stuck="demo-0 crash loop", replication="demo-0: 1/3 in sync"
    )
    assert next(x for x in stuck if x.type == c.DEGRADED).reason == c.ROLLOUT_STUCK
