"""``bench.replication`` runs end to end with small counts (issue 18): a SYNC pair of broker
pods behind popfront takes the load generator's produce and pop+ack phases with the CPU of
the leader pod and of the whole set read; two SIGKILLs of a leader among three replicas
each end with another leader, and no acknowledged write is lost. Timings are not asserted.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import pytest

from bench import replication
from bench.peers import loadgen
from popfleet_testbed import cluster

pytestmark = pytest.mark.timeout(900)  # a cold build of the load generator takes minutes


def test_a_sync_pair_takes_the_phases(
    testbed: cluster.Cluster, testbed_namespace: str, tmp_path: Path
) -> None:
    binary = loadgen.ensure_built()
    shape = replication.start_shape("sync-2", tmp_path, tb=testbed, namespace=testbed_namespace)
    try:
        assert shape.leader in ("a", "b")
        figures = replication.measure(
            shape, binary, argparse.Namespace(messages=300, warmup_messages=100)
        )
    finally:
        shape.stop()
    assert figures["produce"]["messages"] == 300
    assert figures["pop_ack_4"]["messages"] == 300
    for phase in ("produce", "pop_ack_1", "pop_ack_4"):
        leader, whole = figures[phase]["cpu"]["leader"], figures[phase]["cpu"]["set"]
        assert whole["server_cpu_s"] >= leader["server_cpu_s"] > 0  # both pods counted


def test_two_leader_kills_lose_no_acknowledged_write(
    testbed: cluster.Cluster, testbed_namespace: str, tmp_path: Path
) -> None:
    replicas = replication.Replicas(tmp_path, tb=testbed, namespace=testbed_namespace)
    try:
        result = asyncio.run(replication.failovers(replicas, 2))
    finally:
        replicas.stop()
    assert len(result["failover_s"]) == 2
    assert result["acknowledged_writes"] > 100
    assert result["acknowledged_lost"] == 0
    assert result["final_term"] >= 3  # two takeovers after the first term
