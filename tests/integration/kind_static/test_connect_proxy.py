"""e2e/kind's CONNECT proxy, for real on loopback: gRPC goes through it when ``grpc_proxy``
is set (as the kind run sets it), and targets outside its allowed network are refused.

On kind the proxy runs in a pod and allows the pod network; here it runs as a local process
allowing loopback addresses (127.0.0.2, and 127.0.0.3 where a test says so), and gRPC
servers on those addresses stand in for brokers: a health server, a real admin server, a
real ``popbroker all`` with the official client. Nothing here dials outside 127.0.0.0/8.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from rocketmq.v5.util.misc import Misc

from popbroker.admin.server import AdminServer, serve_admin
from popbroker.store.local import LocalStore
from popfleet_api.client import BrokerAdmin
from tests.integration.broker import officialclient as oc
from tests.integration.broker.harness import BrokerProcess
from tests.integration.kind_static.conftest import KIND, load
from tests.storesettings import small_settings

Misc._Misc__LOCAL_IP = "127.0.0.1"  # the client's outbound-address probe, pre-seeded

connect_proxy = load("connect_proxy")
PROXY_VARIABLES = ("grpc_proxy", "https_proxy", "http_proxy", "no_grpc_proxy", "no_proxy")
WAIT_S = 10.0


@dataclass
class RunningProxy:
    """``connect_proxy.py`` in a process of its own, and every line it printed."""

    url: str
    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    def requests(self) -> list[str]:
        """The request lines it answered, with the answers, after a marker request.

        The marker (a request it refuses) is logged after everything sent before it, so
        once it shows, nothing earlier is still on its way through the pipe.
        """
        marker = f"GET /marker-{time.monotonic_ns()} HTTP/1.1"
        host, port = self.url.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=WAIT_S) as conn:
            conn.sendall(f"{marker}\r\n\r\n".encode())
            conn.recv(1024)
        deadline = time.monotonic() + WAIT_S
        while not any(marker in line for line in self.lines):
            assert time.monotonic() < deadline, f"the proxy never logged {marker!r}"
            time.sleep(0.02)
        return [line for line in self.lines if "'CONNECT " in line]


@contextlib.contextmanager
def running_proxy(allow_cidr: str, *, domains: str = "") -> Iterator[RunningProxy]:
    """The proxy on 127.0.0.1 (ephemeral port) allowing ``allow_cidr`` (and names ending
    with ``domains``)."""
    env = {
        **os.environ,
        "ALLOW_CIDR": allow_cidr,
        "ALLOW_DOMAINS": domains,
        "LISTEN": "127.0.0.1:0",
    }
    with subprocess.Popen(
        [sys.executable, str(KIND / "connect_proxy.py")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    ) as process:  # fmt: skip
        try:
            assert process.stdout is not None
            first = process.stdout.readline()  # printed once listening; EOF if it died
            port = re.search(r"\('127\.0\.0\.1', (\d+)\)", first)
            assert port, f"proxy did not start: {first!r}"
            proxy = RunningProxy(f"http://127.0.0.1:{port[1]}", process)
            stdout = process.stdout
            threading.Thread(
                target=lambda: proxy.lines.extend(iter(stdout.readline, "")), daemon=True
            ).start()
            yield proxy
        finally:
            process.terminate()
            process.wait(timeout=10)


@pytest.fixture
def proxy() -> Iterator[RunningProxy]:
    """The proxy allowing only 127.0.0.2."""
    with running_proxy("127.0.0.2/32") as running:
        yield running


@pytest.fixture
def clean_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No proxy variable from the machine's environment leaks into a test."""
    for name in (*PROXY_VARIABLES, *(n.upper() for n in PROXY_VARIABLES)):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture
def health_server() -> Iterator[dict[str, int]]:
    """gRPC health servers on 127.0.0.2 (allowed) and 127.0.0.3 (not), and on 127.0.0.1
    (what ``localhost`` resolves to); their ports by the last byte."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    hosts = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
    ports = {host: server.add_insecure_port(f"{host}:0") for host in hosts}
    server.start()
    yield {host.rsplit(".", 1)[1]: port for host, port in ports.items()}
    server.stop(grace=None)


def check(target: str) -> int:
    with grpc.insecure_channel(target) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=10
        )
    return int(reply.status)


def unused_port(host: str) -> int:
    """A port nothing listens on at ``host`` (bound, then released)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


# ---------------------------------------------------------------- gRPC through the proxy


def test_grpc_reaches_an_allowed_target_through_the_proxy(
    proxy: RunningProxy, health_server: dict[str, int], clean_proxy_environment: pytest.MonkeyPatch
) -> None:
    clean_proxy_environment.setenv("grpc_proxy", proxy.url)
    assert check(f"127.0.0.2:{health_server['2']}") == health_pb2.HealthCheckResponse.SERVING
    assert proxy.requests() == [
        f"connect_proxy: 'CONNECT 127.0.0.2:{health_server['2']} HTTP/1.1'"
        f" -> 200 via 127.0.0.2:{health_server['2']}\n"
    ]


def test_an_empty_no_grpc_proxy_keeps_no_proxy_from_bypassing_the_proxy(
    proxy: RunningProxy, health_server: dict[str, int], clean_proxy_environment: pytest.MonkeyPatch
) -> None:
    """gRPC dials what ``no_proxy`` lists directly even with a proxy; an empty
    ``no_grpc_proxy`` (what ``proxy_tunnel.export_proxy`` sets) takes its place for gRPC."""
    target = f"127.0.0.2:{health_server['2']}"
    clean_proxy_environment.setenv("grpc_proxy", proxy.url)
    clean_proxy_environment.setenv("no_proxy", "127.0.0.2")
    assert check(target) == health_pb2.HealthCheckResponse.SERVING
    assert proxy.requests() == []  # bypassed
    clean_proxy_environment.setenv("no_grpc_proxy", "")
    assert check(target) == health_pb2.HealthCheckResponse.SERVING
    assert len(proxy.requests()) == 1


def test_targets_outside_the_allowed_network_are_refused(
    proxy: RunningProxy, health_server: dict[str, int], clean_proxy_environment: pytest.MonkeyPatch
) -> None:
    clean_proxy_environment.setenv("grpc_proxy", proxy.url)
    with pytest.raises(grpc.RpcError) as refused:
        check(f"127.0.0.3:{health_server['3']}")
    assert "403" in str(refused.value)


def test_a_list_of_targets_is_tunnelled_to_the_first_that_accepts(
    proxy: RunningProxy, health_server: dict[str, int]
) -> None:
    """What gRPC sends for a channel on several addresses: ``[a:p,b:p]:443``."""
    live, dead = health_server["2"], unused_port("127.0.0.2")
    request = f"CONNECT [127.0.0.2:{dead},127.0.0.2:{live}]:443 HTTP/1.1\r\n\r\n"
    host, port = proxy.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=WAIT_S) as conn:
        conn.sendall(request.encode())
        assert conn.recv(1024).startswith(b"HTTP/1.1 200 ")
    nobody = f"CONNECT [127.0.0.2:{dead},127.0.0.2:{unused_port('127.0.0.2')}]:443 HTTP/1.1"
    with socket.create_connection((host, int(port)), timeout=WAIT_S) as conn:
        conn.sendall(f"{nobody}\r\n\r\n".encode())
        assert conn.recv(1024).startswith(b"HTTP/1.1 502 ")
    answered = proxy.requests()
    assert answered[0].endswith(f"-> 200 via 127.0.0.2:{live}\n")
    assert "502" in answered[1]


# ---------------------------------------------------------------- the request lines it parses


def test_request_lines_the_proxy_accepts() -> None:
    allowed = ipaddress.ip_network("10.244.0.0/16")
    accepted = {
        "CONNECT 10.244.1.9:9877 HTTP/1.1": [("10.244.1.9", 9877)],
        # the official client's multi-endpoint bootstrap, as gRPC's proxy mapper sends it
        "CONNECT [10.244.0.48:8081,10.244.0.49:8081,10.244.0.50:8081]:443 HTTP/1.1": [
            ("10.244.0.48", 8081),
            ("10.244.0.49", 8081),
            ("10.244.0.50", 8081),
        ],
    }
    for line, targets in accepted.items():
        assert connect_proxy.target_of(line, allowed) == targets
    v6 = ipaddress.ip_network("fd00:10:244::/56")
    assert connect_proxy.target_of("CONNECT [fd00:10:244::7]:8081 HTTP/1.1", v6) == [
        ("fd00:10:244::7", 8081)
    ]
    line = "CONNECT [fd00:10:244::7]:8081,[fd00:10:244::8]:8082 HTTP/1.1"
    assert connect_proxy.target_of(line, v6) == [("fd00:10:244::7", 8081), ("fd00:10:244::8", 8082)]
    line = "CONNECT [[fd00:10:244::7]:8081,[fd00:10:244::8]:8082]:443 HTTP/1.1"
    assert connect_proxy.target_of(line, v6) == [("fd00:10:244::7", 8081), ("fd00:10:244::8", 8082)]


def test_request_lines_the_proxy_refuses() -> None:
    allowed = ipaddress.ip_network("10.244.0.0/16")
    many = ",".join(f"10.244.0.{n}:8081" for n in range(1, 18))
    for line, code in [
        ("GET http://10.244.1.9/ HTTP/1.1", "405"),
        ("CONNECT 10.244.1.9 HTTP/1.1", "400"),
        ("CONNECT 10.244.1.9:0 HTTP/1.1", "400"),
        ("CONNECT 10.244.1.9:65536 HTTP/1.1", "400"),
        ("CONNECT broker-0:8081 HTTP/1.1", "403"),
        ("CONNECT 10.96.0.1:443 HTTP/1.1", "403"),
        # one address outside the network refuses the whole list, wherever it is
        ("CONNECT [10.244.0.48:8081,10.96.0.10:8081]:443 HTTP/1.1", "403"),
        ("CONNECT [10.96.0.10:8081,10.244.0.48:8081]:443 HTTP/1.1", "403"),
        ("CONNECT [10.244.0.48:8081,8.8.8.8:53]:443 HTTP/1.1", "403"),
        ("CONNECT [10.244.0.48:8081,broker-1:8081]:443 HTTP/1.1", "403"),
        ("CONNECT [10.244.0.48:8081,10.244.0.49]:443 HTTP/1.1", "400"),
        ("CONNECT [10.244.0.48:8081,]:443 HTTP/1.1", "400"),
        ("CONNECT [10.244.0.48:8081,10.244.0.49:8081 HTTP/1.1", "400"),
        ("CONNECT [10.244.0.48]:8081 HTTP/1.1", "400"),  # IPv4 is never bracketed
        ("CONNECT [::1]:8081 HTTP/1.1", "403"),
        (f"CONNECT [{many}]:443 HTTP/1.1", "400"),
    ]:
        with pytest.raises(ValueError, match=f"^{code} "):
            connect_proxy.target_of(line, allowed)


# ---------------------------------------------------------------- the admin client and the proxy


@pytest.fixture
async def admin_server(tmp_path: Path) -> AsyncIterator[AdminServer]:
    """A real admin server (over a LocalStore) on 127.0.0.2."""
    store = LocalStore.open(tmp_path / "data", small_settings(cluster="c", broker_name="b-0"))
    server = await serve_admin(store, listen="127.0.0.2:0")
    try:
        yield server
    finally:
        await server.stop(None)
        await store.close()


async def test_the_admin_client_goes_through_the_proxy_it_is_given(
    proxy: RunningProxy, admin_server: AdminServer, clean_proxy_environment: pytest.MonkeyPatch
) -> None:
    target = f"127.0.0.2:{admin_server.port}"
    async with BrokerAdmin(target, timeout_s=5, proxy=proxy.url) as admin:
        assert (await admin.info()).broker_name == "b-0"
    assert proxy.requests() == [f"connect_proxy: 'CONNECT {target} HTTP/1.1' -> 200 via {target}\n"]


async def test_the_admin_client_ignores_proxies_in_the_environment(
    proxy: RunningProxy, admin_server: AdminServer, clean_proxy_environment: pytest.MonkeyPatch
) -> None:
    """Without ``proxy`` it dials the broker itself, whatever the environment says: in a pod
    an ``HTTP(S)_PROXY`` must not catch the operator's calls to brokers."""
    for name in ("grpc_proxy", "https_proxy", "http_proxy"):
        clean_proxy_environment.setenv(name, proxy.url)
    async with BrokerAdmin(f"127.0.0.2:{admin_server.port}", timeout_s=5) as admin:
        assert (await admin.info()).broker_name == "b-0"
    assert proxy.requests() == []


async def test_a_refusing_proxy_fails_the_admin_call(
    proxy: RunningProxy, tmp_path: Path, clean_proxy_environment: pytest.MonkeyPatch
) -> None:
    """The call really depends on the proxy: one that refuses the target fails it."""
    store = LocalStore.open(tmp_path / "data", small_settings(cluster="c", broker_name="b-0"))
    server = await serve_admin(store, listen="127.0.0.3:0")  # outside what the proxy allows
    try:
        async with BrokerAdmin(f"127.0.0.3:{server.port}", timeout_s=5, proxy=proxy.url) as admin:
            with pytest.raises(Exception, match="403"):
                await admin.info()
    finally:
        await server.stop(None)
        await store.close()


# ---------------------------------------------------------------- the official client's bootstrap


@pytest.fixture
def broker_on_127_0_0_3(tmp_path: Path) -> Iterator[BrokerProcess]:
    from popbroker.store.api import TopicConfig  # noqa: PLC0415

    process = BrokerProcess.start(
        tmp_path / "broker", mode="all", host="127.0.0.3",
        topics=[TopicConfig("orders", read_queue_nums=2, write_queue_nums=2)], groups=[],
    )  # fmt: skip
    try:
        yield process
    finally:
        process.stop()
        print(process.logs())


def test_the_official_client_bootstraps_from_several_endpoints_through_the_proxy(
    broker_on_127_0_0_3: BrokerProcess,
    clean_proxy_environment: pytest.MonkeyPatch,
    main_thread_event_loop: None,
) -> None:
    """``a:p;b:p`` makes one channel on both addresses; gRPC asks the proxy for
    ``[a:p,b:p]:443``. Nothing listens on the first (127.0.0.2), so the proxy tunnels to the
    second; the route then advertises 127.0.0.3, also reached through the proxy."""
    port = broker_on_127_0_0_3.port
    with pytest.raises(ConnectionRefusedError):  # the first endpoint is dead
        socket.create_connection(("127.0.0.2", port), timeout=WAIT_S).close()
    with running_proxy("127.0.0.2/31") as proxy:
        clean_proxy_environment.setenv("grpc_proxy", proxy.url)
        with oc.producer(f"127.0.0.2:{port};127.0.0.3:{port}", ["orders"]) as producer:
            receipt = producer.send(oc.message("orders", b"through the proxy"))
        assert receipt.message_id
        answered = proxy.requests()
    bootstrap = f"'CONNECT [127.0.0.2:{port},127.0.0.3:{port}]:443 HTTP/1.1'"
    assert any(
        bootstrap in line and line.endswith(f"200 via 127.0.0.3:{port}\n") for line in answered
    ), answered
    routed = f"'CONNECT 127.0.0.3:{port} HTTP/1.1' -> 200"
    assert any(routed in line for line in answered), answered


def test_several_allowed_networks_admit_an_address_in_any_of_them() -> None:
    """ALLOW_CIDR=pods,services: the brokers' pod IPs and their client Service's ClusterIP."""
    allowed = connect_proxy.parse_networks("10.244.0.0/16, 10.96.0.0/16")
    assert str(allowed) == "10.244.0.0/16,10.96.0.0/16"
    line = "CONNECT [10.96.0.20:8081,10.244.0.7:8081]:443 HTTP/1.1"
    assert connect_proxy.target_of(line, allowed) == [("10.96.0.20", 8081), ("10.244.0.7", 8081)]
    outside = r"^403 10\.97\.0\.1 is outside 10\.244\.0\.0/16,10\.96\.0\.0/16"
    with pytest.raises(ValueError, match=outside):
        connect_proxy.target_of("CONNECT 10.97.0.1:8081 HTTP/1.1", allowed)
    with pytest.raises(ValueError, match="no network"):
        connect_proxy.parse_networks(" , ")


def test_names_with_an_allowed_suffix_pass_and_others_are_refused() -> None:
    """A replicated set's Service name in routes (``rep-0.story.svc:8081``) is a target when
    ``ALLOW_DOMAINS`` allows its suffix; it is resolved when dialled, not here."""
    allowed = ipaddress.ip_network("10.244.0.0/16")
    domains = (".svc",)
    line = "CONNECT rep-0.story.svc:8081 HTTP/1.1"
    assert connect_proxy.target_of(line, allowed, domains) == [("rep-0.story.svc", 8081)]
    with pytest.raises(ValueError, match=r"^403 "):  # no suffix allowed: IP literals only
        connect_proxy.target_of(line, allowed)
    for refused in (
        "CONNECT example.com:443 HTTP/1.1",
        "CONNECT rep-0.story.svc.evil.com:8081 HTTP/1.1",
        "CONNECT [rep-0.story.svc]:8081 HTTP/1.1",
        "CONNECT bad_name.svc:8081 HTTP/1.1",
        "CONNECT .svc:8081 HTTP/1.1",
    ):
        with pytest.raises(ValueError, match=r"^40[03] "):
            connect_proxy.target_of(refused, allowed, domains)


def test_an_allowed_name_is_dialled_only_at_its_addresses_inside_the_network(
    health_server: dict[str, int], clean_proxy_environment: pytest.MonkeyPatch
) -> None:
    """gRPC hands the proxy the target's name unresolved (the host never looks it up); the
    proxy resolves it and dials only addresses inside ``ALLOW_CIDR``. ``localhost`` stands
    in for a cluster Service name: it resolves to 127.0.0.1 (and ::1) here."""
    port = health_server["1"]
    with running_proxy("127.0.0.1/32", domains="localhost") as proxy:
        clean_proxy_environment.setenv("grpc_proxy", proxy.url)
        assert check(f"localhost:{port}") == health_pb2.HealthCheckResponse.SERVING
        answered = proxy.requests()
    assert answered == [
        f"connect_proxy: 'CONNECT localhost:{port} HTTP/1.1' -> 200 via 127.0.0.1:{port}\n"
    ]
    with running_proxy("127.0.0.2/32", domains="localhost") as proxy:  # resolves outside
        clean_proxy_environment.setenv("grpc_proxy", proxy.url)
        with pytest.raises(grpc.RpcError):
            check(f"localhost:{port}")
        (refused,) = proxy.requests()
    assert "502" in refused and "resolves outside 127.0.0.2/32" in refused
