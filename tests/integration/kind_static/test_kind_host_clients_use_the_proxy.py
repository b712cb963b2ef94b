"""The kind run's host-side clients reach pod and service addresses only through the proxy.

Why: a hard rule on our machines — host processes never dial the cluster's pod
(10.244.0.0/16) or service (10.96.0.0/16) addresses themselves; the e2e reaches them only
through the proxy pod behind ``kubectl port-forward`` (see shared/reference/kind-offline.md).

How, without a cluster: the kind ``ClusterAccess`` is built as ``kind_access.main`` builds it
(before the tunnel, then ``through_proxy`` with the environment ``proxy_tunnel`` exports);
gRPC's channel constructors are replaced by a recorder that keeps each channel's target,
options and proxy environment and then refuses (so nothing is ever dialled). The scenario's
host-side gRPC clients run against broker pod addresses — ``brokers.call`` (the admin client)
and the official client as ``traffic`` configures it — and every recorded channel to a pod or
service address must be one gRPC sends through the tunnel, by gRPC's own rules: the
``grpc.http_proxy`` argument, else ``grpc_proxy``/``https_proxy``/``http_proxy`` from the
environment; none if ``grpc.enable_http_proxy`` is 0; possibly none for a host that
``no_grpc_proxy`` (else ``no_proxy``) lists, so any such list counts as "not proxied".
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from rocketmq import Producer
from rocketmq.v5.util.misc import Misc

from popfleet_e2e import brokers, traffic
from popfleet_e2e.access import ClusterAccess
from tests.integration.kind_static.conftest import KIND, load

Misc._Misc__LOCAL_IP = "127.0.0.1"  # the client's outbound-address probe, pre-seeded

kind_access = load("kind_access")
proxy_tunnel = load("proxy_tunnel")

CLUSTER_NETWORKS = [ipaddress.ip_network("10.244.0.0/16"), ipaddress.ip_network("10.96.0.0/16")]
TUNNEL = "http://127.0.0.1:40123"  # a port-forward's URL; nothing is dialled in these tests
PODS = [brokers.Broker(f"popfleet-broker-{n}", f"10.244.0.{48 + n}:8081") for n in range(3)]
ENVIRONMENT = ("grpc_proxy", "https_proxy", "http_proxy", "no_grpc_proxy", "no_proxy")


class NotDialled(Exception):
    """Raised by the recorder instead of making a channel."""


@dataclass(frozen=True)
class Channel:
    target: str
    options: dict[str, Any]
    environ: dict[str, str]

    def hosts(self) -> list[str]:
        """The IP literals a gRPC target names (``ipv4:a:p,b:p``, ``[v6]:p``, ``host:p``)."""
        addresses = re.sub(r"^(ipv4|ipv6|dns):(///)?", "", self.target)
        return [a.rpartition(":")[0].strip("[]") for a in addresses.split(",")]

    def in_cluster_networks(self) -> bool:
        for host in self.hosts():
            try:
                address = ipaddress.ip_address(host)
            except ValueError:
                continue
            if any(address in network for network in CLUSTER_NETWORKS):
                return True
        return False

    def proxy(self) -> str | None:
        """The proxy gRPC would send this channel through (None: dialled directly)."""
        if self.options.get("grpc.enable_http_proxy", 1) == 0:
            return None
        candidates = [self.options.get("grpc.http_proxy")]
        candidates += [self.environ.get(n) for n in ("grpc_proxy", "https_proxy", "http_proxy")]
        chosen = next((c for c in candidates if c is not None), None)
        env = self.environ
        exempt = env["no_grpc_proxy"] if "no_grpc_proxy" in env else env.get("no_proxy")
        return None if exempt else (chosen or None)


class Recorder:
    """Stands in for gRPC's channel constructors: records, never dials."""

    def __init__(self) -> None:
        self.channels: list[Channel] = []

    def _record(self, target: str, options: Any) -> None:
        environ = {n: os.environ[n] for n in ENVIRONMENT if n in os.environ}
        self.channels.append(Channel(str(target), dict(options or ()), environ))
        raise NotDialled(target)

    def insecure(self, target: str, options: Any = None, *args: Any, **kwargs: Any) -> Any:
        self._record(target, options)

    def secure(self, target: str, credentials: Any, options: Any = None, *a: Any, **k: Any) -> Any:
        self._record(target, options)

    def to_the_cluster(self) -> list[Channel]:
        return [c for c in self.channels if c.in_cluster_networks()]


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    recording = Recorder()
    for module in (grpc, grpc.aio):
        monkeypatch.setattr(module, "insecure_channel", recording.insecure)
        monkeypatch.setattr(module, "secure_channel", recording.secure)
    return recording


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No proxy variable from the machine; whatever a test sets is undone afterwards."""
    for name in (*ENVIRONMENT, *(n.upper() for n in ENVIRONMENT)):
        monkeypatch.setenv(name, "-")  # remembered as it was, restored at the end
        monkeypatch.delenv(name)
    return monkeypatch


def kind_access_before_the_tunnel() -> ClusterAccess:
    """As ``kind_access.main`` builds it, without a cluster."""
    return ClusterAccess(
        kubeconfig=Path("/nonexistent/kubeconfig"),
        namespace=kind_access.story_namespace(KIND / "values" / "kind.yaml", None),
        resolve=kind_access.pod_network_resolver(kind_access.pod_subnet()),
        bin_dir=Path("/nonexistent"),
        helm_values=kind_access.helm_sets(KIND / "values" / "kind.yaml"),
    )


def kind_access_through_the_tunnel() -> ClusterAccess:
    """What ``main`` hands the scenario once ``proxy_tunnel`` is up (and has exported)."""
    proxy_tunnel.export_proxy(TUNNEL)
    access = kind_access.through_proxy(
        kind_access_before_the_tunnel(), subnet=kind_access.pod_subnet(), proxy=TUNNEL
    )
    assert isinstance(access, ClusterAccess)
    return access


def admin_call(access: ClusterAccess) -> None:
    with pytest.raises(NotDialled):
        brokers.call(access, PODS[0], lambda admin: admin.info())


def official_client(access: ClusterAccess) -> None:
    """The producer as ``traffic`` configures it, on the story's multi-endpoint bootstrap."""
    producer = Producer(traffic.configuration(brokers.bootstrap(access, PODS)), ("orders",))
    try:
        producer.startup()  # the client logs a failed channel and carries on
    except NotDialled:
        pass
    finally:
        producer.shutdown()


def test_every_host_channel_to_a_pod_goes_through_the_tunnel(
    recorder: Recorder, environment: pytest.MonkeyPatch, main_thread_event_loop: None
) -> None:
    environment.setenv("no_proxy", "localhost,127.0.0.1,.svc,10.0.0.0/8")  # a usual machine's
    access = kind_access_through_the_tunnel()
    admin_call(access)
    official_client(access)
    to_pods = recorder.to_the_cluster()
    assert {c.target for c in to_pods} >= {
        "10.244.0.48:9877",  # the admin client
        "ipv4:10.244.0.48:8081,10.244.0.49:8081,10.244.0.50:8081",  # the official client
    }, recorder.channels
    direct = [c for c in to_pods if c.proxy() != TUNNEL]
    assert direct == [], f"channels to pod addresses that bypass the tunnel: {direct}"


def test_before_the_tunnel_nothing_resolves_or_dials(
    recorder: Recorder, environment: pytest.MonkeyPatch
) -> None:
    access = kind_access_before_the_tunnel()
    assert access.grpc_proxy is None
    with pytest.raises(kind_access.KindAccessError, match="no proxy"):
        brokers.call(access, PODS[0], lambda admin: admin.info())
    with pytest.raises(kind_access.KindAccessError, match="no proxy"):
        brokers.bootstrap(access, PODS)
    assert recorder.channels == []


@pytest.mark.parametrize(
    ("environ", "refusal"),
    [
        ({}, "grpc_proxy is None"),
        ({"grpc_proxy": "http://127.0.0.1:1"}, "grpc_proxy is 'http://127.0.0.1:1'"),
        ({"grpc_proxy": TUNNEL, "no_proxy": "10.0.0.0/8"}, "could exempt"),
        ({"grpc_proxy": TUNNEL, "no_proxy": "0"}, "could exempt"),  # gRPC matches suffixes
        ({"grpc_proxy": TUNNEL, "no_grpc_proxy": ".49"}, "could exempt"),
    ],
)
def test_an_environment_that_would_bypass_the_tunnel_is_refused(
    environ: Mapping[str, str], refusal: str
) -> None:
    resolve = kind_access.pod_network_resolver(
        kind_access.pod_subnet(), proxy=TUNNEL, environ=environ
    )
    with pytest.raises(kind_access.KindAccessError, match=re.escape(refusal)):
        resolve("10.244.0.48:8081")


@pytest.mark.parametrize(
    "proxy", [None, "", "http://10.244.0.9:3128", "http://proxy.example:3128", "127.0.0.1:3128"]
)
def test_only_a_loopback_tunnel_counts_as_a_proxy(proxy: str | None) -> None:
    environ = {"grpc_proxy": proxy or "", "no_grpc_proxy": ""}
    assert kind_access.proxy_problem(proxy, environ) is not None
    assert kind_access.proxy_problem(TUNNEL, {"grpc_proxy": TUNNEL, "no_grpc_proxy": ""}) is None


def test_the_tunnel_exports_the_proxy_and_restores_the_environment(
    environment: pytest.MonkeyPatch,
) -> None:
    environment.setenv("no_proxy", "10.0.0.0/8,.svc")  # kubectl's, kept for kubectl
    replaced = proxy_tunnel.export_proxy(TUNNEL)
    assert kind_access.proxy_problem(TUNNEL, os.environ) is None
    assert os.environ["no_proxy"] == "10.0.0.0/8,.svc"
    proxy_tunnel.restore_environment(replaced)
    assert "grpc_proxy" not in os.environ and "no_grpc_proxy" not in os.environ


def test_main_runs_the_scenario_through_the_tunnel() -> None:
    """``main`` hands the scenario the proxied access, and the tunnel exports the proxy
    (both need a cluster to run, so their wiring is read here)."""
    main = (KIND / "kind_access.py").read_text().split("def main(", 1)[1].split("\ndef ", 1)[0]
    assert "run_scenario(through_proxy(access, subnet=subnet, proxy=proxy))" in main
    tunnel = (KIND / "proxy_tunnel.py").read_text().split("class Tunnel", 1)[1]
    assert "export_proxy(url)" in tunnel and "restore_environment(" in tunnel
