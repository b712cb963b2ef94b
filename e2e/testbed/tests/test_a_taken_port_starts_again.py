"""A port that was free when chosen and taken before its component bound it (another
process got it from the kernel meanwhile, as under a parallel test run): the testbed starts
again on new ports instead of failing (seen in CI: etcd's "address already in use")."""

from __future__ import annotations

import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from popfleet_testbed import controlplane
from popfleet_testbed.cluster import Cluster

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


def test_etcd_on_a_taken_port_starts_again_on_new_ports(
    testbed: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    taken_port = int(taken.getsockname()[1])
    real = controlplane.free_port
    chosen: list[int] = []

    def ports() -> Iterator[int]:
        yield taken_port  # the first etcd port: someone else holds it by now
        while True:
            yield real()

    supply = ports()

    def choose() -> int:
        chosen.append(next(supply))
        return chosen[-1]

    monkeypatch.setattr(controlplane, "free_port", choose)
    run_dir = Path(tempfile.mkdtemp(prefix="popfleet-testbed-port-"))
    try:
        info = controlplane.up(run_dir, node_name="port-node", bins=testbed.info.binaries)
        assert info.etcd_port != taken_port
        assert chosen[0] == taken_port and chosen.count(taken_port) == 1
        assert controlplane.running(run_dir)
    finally:
        controlplane.down(run_dir)
        taken.close()
