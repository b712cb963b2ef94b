"""e2e/kind's CONNECT proxy, for real on loopback: gRPC goes through it when ``grpc_proxy``
is set (as the kind run sets it), and targets outside its allowed network are refused.

On kind the proxy runs in a pod and allows the pod network; here it runs as a local process
allowing one loopback address, and a gRPC health server stands in for a broker.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from tests.integration.kind_static.conftest import KIND, load


@pytest.fixture
def proxy() -> Iterator[str]:
    """The proxy on 127.0.0.1 (ephemeral port), allowing only 127.0.0.2; its URL."""
    env = {**os.environ, "ALLOW_CIDR": "127.0.0.2/32", "LISTEN": "127.0.0.1:0"}
    with subprocess.Popen(
        [sys.executable, str(KIND / "connect_proxy.py")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    ) as process:  # fmt: skip
        try:
            assert process.stdout is not None
            first = process.stdout.readline()  # printed once listening; EOF if it died
            port = re.search(r"\('127\.0\.0\.1', (\d+)\)", first)
            assert port, f"proxy did not start: {first!r}"
            yield f"http://127.0.0.1:{port[1]}"
        finally:
            process.terminate()
            process.wait(timeout=10)


@pytest.fixture
def health_server() -> Iterator[dict[str, int]]:
    """gRPC health servers on 127.0.0.2 (allowed) and 127.0.0.3 (not); their ports."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    ports = {host: server.add_insecure_port(f"{host}:0") for host in ("127.0.0.2", "127.0.0.3")}
    server.start()
    yield {host.rsplit(".", 1)[1]: port for host, port in ports.items()}
    server.stop(grace=None)


def check(target: str) -> int:
    with grpc.insecure_channel(target) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=10
        )
    return int(reply.status)


def test_grpc_reaches_an_allowed_target_through_the_proxy(
    proxy: str, health_server: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("grpc_proxy", proxy)
    assert check(f"127.0.0.2:{health_server['2']}") == health_pb2.HealthCheckResponse.SERVING


def test_targets_outside_the_allowed_network_are_refused(
    proxy: str, health_server: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("grpc_proxy", proxy)
    with pytest.raises(grpc.RpcError) as refused:
        check(f"127.0.0.3:{health_server['3']}")
    assert "403" in str(refused.value)


def test_request_lines_the_proxy_refuses() -> None:
    connect_proxy = load("connect_proxy")
    allowed = __import__("ipaddress").ip_network("10.244.0.0/16")
    assert connect_proxy.target_of("CONNECT 10.244.1.9:9877 HTTP/1.1", allowed) == "10.244.1.9:9877"
    for line, code in [
        ("GET http://10.244.1.9/ HTTP/1.1", "405"),
        ("CONNECT 10.244.1.9 HTTP/1.1", "400"),
        ("CONNECT broker-0:8081 HTTP/1.1", "403"),
        ("CONNECT 10.96.0.1:443 HTTP/1.1", "403"),
    ]:
        with pytest.raises(ValueError, match=code):
            connect_proxy.target_of(line, allowed)
