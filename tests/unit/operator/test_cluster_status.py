"""BrokerCluster status: ready counts, per-broker entries, scale-down blocked, unreachable."""

from __future__ import annotations

from popfleet_operator.model.observations import BrokerInfo, BrokerPod
from popfleet_operator.status import clusters
from popfleet_operator.status import conditions as c


def info(i: int, *, ready: bool = True, reachable: bool = True) -> BrokerInfo:
    pod = BrokerPod(f"demo-{i}", i, f"127.0.1.{i + 2}", ready=ready)
    return BrokerInfo(pod, reachable=reachable, config_epoch=f"e{i}", serving=reachable)


def test_all_ready() -> None:
    infos = [info(0), info(1), info(2)]
    ready, reconciling, degraded = clusters.cluster_conditions(infos, desired=3, replicas=3)
    assert (ready.status, ready.reason, ready.message) == (
        True,
        c.ALL_BROKERS_READY,
        "3/3 brokers ready",
    )
    assert reconciling.status is False and degraded.status is False
    entries = clusters.broker_entries(infos)
    assert entries[2] == {
        "name": "demo-2",
        "ready": True,
        "lastError": "",
        "endpoint": "127.0.1.4:8081",
        "adminEndpoint": "127.0.1.4:9877",
        "configEpoch": "e2",
    }


def test_scaling_and_unreachable() -> None:
    infos = [info(0), info(1, reachable=False), info(2, ready=False, reachable=False)]
    ready, reconciling, degraded = clusters.cluster_conditions(infos, desired=3, replicas=3)
    assert ready.status is False and ready.message == "1/3 brokers ready"
    assert (reconciling.status, reconciling.reason) == (True, c.SCALING)
    assert (degraded.status, degraded.reason) == (True, c.BROKER_UNREACHABLE)
    assert degraded.message.endswith("demo-1")


def test_scale_down_blocked_says_why() -> None:
    infos = [info(0), info(1), info(2)]
    conds = clusters.cluster_conditions(infos, desired=2, replicas=3, blocked="waits: broker 2")
    ready, reconciling, degraded = conds
    assert ready.status is False
    assert (reconciling.reason, reconciling.message) == (c.SCALE_DOWN_BLOCKED, "waits: broker 2")
    assert degraded.reason == c.SCALE_DOWN_BLOCKED
    assert clusters.ready_count(infos, desired=2) == 2


def test_fingerprint_changes_when_brokers_that_matter_change() -> None:
    entries = clusters.broker_entries([info(0), info(1)])
    same = clusters.fingerprint(list(reversed(entries)))
    assert clusters.fingerprint(entries) == same
    restarted = clusters.broker_entries([info(0), info(1, reachable=False)])
    assert clusters.fingerprint(restarted) != same
    emptied = [dict(entries[0]), {**entries[1], "configEpoch": "new"}]
    assert clusters.fingerprint(emptied) != same
    assert clusters.fingerprint([{**entries[0], "lastError": "x"}, entries[1]]) == same


def test_pods_fingerprint_sees_ip_readiness_and_leaving() -> None:
    pods = [BrokerPod("demo-0", 0, "127.0.1.2", ready=True)]
    base = clusters.pods_fingerprint(pods)
    assert clusters.pods_fingerprint([BrokerPod("demo-0", 0, "127.0.1.2", ready=True)]) == base
    assert clusters.pods_fingerprint([BrokerPod("demo-0", 0, "127.0.1.9", ready=True)]) != base
    assert clusters.pods_fingerprint([BrokerPod("demo-0", 0, "127.0.1.2", ready=False)]) != base
    assert clusters.pods_fingerprint([]) != base


def test_a_broker_that_said_nothing_keeps_its_last_epoch() -> None:
    infos = [info(0), info(1, reachable=False)]
    silent = BrokerInfo(infos[1].pod, reachable=False)
    previous = [{"name": "demo-0", "configEpoch": "e0"}, {"name": "demo-1", "configEpoch": "e1"}]
    entries = clusters.broker_entries([infos[0], silent], previous=previous)
    assert [e.get("configEpoch") for e in entries] == ["e0", "e1"]
    assert "configEpoch" not in clusters.broker_entries([silent])[0]
