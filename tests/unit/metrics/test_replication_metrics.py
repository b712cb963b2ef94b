"""The replication metrics as a scrape shows them (issue 18)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from popbroker.metrics.replication import observe_replication
from popbroker.replication.figures import ReplicationFigures


def _scrape(figures: ReplicationFigures) -> set[str]:
    registry = CollectorRegistry()
    observe_replication(lambda: figures, registry)
    text = generate_latest(registry).decode()
    return {line for line in text.splitlines() if not line.startswith("#")}


def test_a_leader_exports_its_set_and_each_followers_lag() -> None:
    lines = _scrape(
        ReplicationFigures(
            term=4,
            leading=True,
            in_sync=("a", "b"),
            lag_bytes={"b": 0, "c": 4096},
            lag_ms={"b": 12, "c": 7_500},
            term_changes=3,
            fenced_writes=2,
            hand_overs=1,
        )
    )
    assert {
        "popfleet_replication_leader 1.0",
        "popfleet_replication_term 4.0",
        "popfleet_replication_in_sync_replicas 2.0",
        'popfleet_replication_lag_bytes{follower="b"} 0.0',
        'popfleet_replication_lag_bytes{follower="c"} 4096.0',
        'popfleet_replication_lag_seconds{follower="b"} 0.012',
        'popfleet_replication_lag_seconds{follower="c"} 7.5',
        "popfleet_replication_term_changes_total 3.0",
        "popfleet_replication_fenced_writes_total 2.0",
        "popfleet_replication_hand_overs_total 1.0",
    } <= lines


def test_a_follower_exports_no_set_and_no_lag() -> None:
    lines = _scrape(ReplicationFigures(term=2, leading=False, fenced_writes=5))
    assert "popfleet_replication_leader 0.0" in lines
    assert "popfleet_replication_fenced_writes_total 5.0" in lines
    assert not any(
        line.startswith(("popfleet_replication_in_sync", "popfleet_replication_lag"))
        for line in lines
    )
