"""The peer benchmark's harness starts each server on loopback and leaves nothing running.

Each server (NATS JetStream, Redis with AOF, ``popbroker all``, and popfleet's
three role processes) is started by
:mod:`bench.peers.servers` on a temp dir and a free 127.0.0.1 port, answers its
protocol's greeting, and is stopped by PID; afterwards no PID it had (nor a
child it forked) is alive. The Debian packages are installed by the harness when
missing (root + apt-get); without them this test fails with the install command.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc
from rocketmq.v5.util.misc import Misc

from bench.peers import procs, servers

Misc._Misc__LOCAL_IP = "127.0.0.1"  # the official package never probes off loopback

# Installing the Debian packages on a fresh machine is the slow part; the
# start/stop of each server is bounded inside the harness (15 s / 10 s).
pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def binaries() -> servers.Binaries:
    return servers.ensure_binaries()


def _check_start_stop(server: procs.ServerProcess, greet: Callable[[int], bytes]) -> None:
    try:
        assert procs.pid_alive(server.pid)
        assert greet(server.port)
    finally:
        signalled = server.stop()
    assert server.pid in signalled
    assert server.alive_pids() == []
    assert not any(procs.pid_alive(pid) for pid in signalled)


def test_nats_jetstream_starts_and_stops(binaries: servers.Binaries, tmp_path: Path) -> None:
    server = servers.start_nats(binaries, tmp_path)
    _check_start_stop(server, lambda port: procs.tcp_exchange(port, b""))
    assert (tmp_path / "jetstream").is_dir()


def test_redis_with_aof_starts_and_stops(binaries: servers.Binaries, tmp_path: Path) -> None:
    server = servers.start_redis(binaries, tmp_path)
    _check_start_stop(
        server,
        lambda port: (
            procs.tcp_exchange(port, b"CONFIG GET appendfsync\r\n")
            + procs.tcp_exchange(port, b"PING\r\n")
        ),
    )
    assert any((tmp_path / "redis").iterdir())


def test_popfleet_starts_and_stops(tmp_path: Path) -> None:
    reason = servers.popfleet_available()
    assert reason is None, reason
    server = servers.start_popfleet(
        tmp_path, topics=[servers.PopfleetTopic("bench")], groups=["bench-group"]
    )
    _check_start_stop(server, _query_route)


def test_popfleet_roles_start_and_stop_together(tmp_path: Path) -> None:
    """The deployment shape: store, popack and revive processes meeting on a Unix socket."""
    server = servers.start_popfleet_roles(
        tmp_path, topics=[servers.PopfleetTopic("bench")], groups=["bench-group"]
    )
    try:
        assert [p.name for p in server.processes] == [
            "popfleet-store",
            "popfleet-popack",
            "popfleet-revive",
        ]
        assert all(procs.pid_alive(pid) for pid in server.root_pids())
        assert (tmp_path / "store.sock").exists()
        assert _query_route(int(server.endpoint.rsplit(":", 1)[1]))
    finally:
        signalled = server.stop()
    assert set(server.root_pids()) <= set(signalled)
    assert server.alive_pids() == []


def _query_route(port: int) -> bytes:
    """One real v2 call: QueryRoute of the seeded topic answers OK with its queues."""
    endpoints = definition_pb2.Endpoints(
        scheme=definition_pb2.IPv4, addresses=[definition_pb2.Address(host=procs.HOST, port=port)]
    )
    with grpc.insecure_channel(f"{procs.HOST}:{port}") as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        reply = stub.QueryRoute(
            service_pb2.QueryRouteRequest(
                topic=definition_pb2.Resource(name="bench"), endpoints=endpoints
            ),
            timeout=10,
        )
    assert reply.status.code == definition_pb2.OK, reply.status
    assert len(reply.message_queues) == 4
    return bytes(reply.SerializeToString())
