"""A BrokerCluster declaring client credentials and TLS, on the testbed with the chart's operator.

The operator mounts both Secrets into popack and passes the flags; the broker then
serves the client port over TLS only, answers unsigned calls UNAUTHORIZED and signed
ones normally, and every role's /metrics port (9100-9102 on the pod IP) counts them.
The certificate names ``popfleet-broker`` (pod IPs are not known in advance), so the
TLS client overrides the target name; the calls are the official client's messages
and signature (``x-mq-date-time`` + ``MQv2-HMAC-SHA1``).
"""

from __future__ import annotations

import asyncio
import base64
import urllib.request
from collections.abc import Iterator
from datetime import datetime

import grpc
import pytest

from popbroker.auth import signature
from popbroker.grpc.protocol import Code, MessagingServiceStub, definition, service
from popfleet_operator.model import names
from popfleet_testbed import cluster, waiting
from tests.integration.broker.certs import make_certificate
from tests.integration.operator import clientprotocol, story

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("operator_log_clean")]

CLUSTER = "secured"
SERVER_NAME = "popfleet-broker"
CREDENTIALS = "accounts:\n  - accessKey: app\n    secretKey: app-secret\n    publish: ['*']\n"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture(scope="module")
def secured(
    popfleet_release: cluster.Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, bytes]]:
    cert, key = make_certificate(tmp_path_factory.mktemp("tls"), dns_names=(SERVER_NAME,))
    ns = popfleet_release.new_namespace("secured")
    popfleet_release.apply(
        ns,
        {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "client-keys"},
            "stringData": {names.CREDENTIALS_KEY: CREDENTIALS},
        },
        {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "broker-tls"},
            "type": "kubernetes.io/tls",
            "data": {"tls.crt": _b64(cert.read_bytes()), "tls.key": _b64(key.read_bytes())},
        },
        {
            "apiVersion": "popfleet.io/v1alpha1", "kind": "BrokerCluster",
            "metadata": {"name": CLUSTER},
            "spec": {
                "brokers": 1, "storage": {"size": "64Mi"},
                "auth": {"credentialsSecret": {"name": "client-keys"}},
                "tls": {"secretName": "broker-tls"},
            },
        },
    )  # fmt: skip
    yield ns, cert.read_bytes()
    popfleet_release.delete_namespace(ns)


def _signed() -> tuple[tuple[str, str], ...]:
    date = datetime.now().strftime(signature.DATE_FORMAT)  # local time, as the client stamps
    auth = (
        f"MQv2-HMAC-SHA1 Credential=app, SignedHeaders=x-mq-date-time, "
        f"Signature={signature.sign('app-secret', date)}"
    )
    return (("x-mq-date-time", date), ("authorization", auth), ("x-mq-client-id", "tb-1"))


async def _routes(endpoint: str, ca: bytes) -> list[int]:
    """QueryRoute codes, unsigned then signed, and SendMessage codes, unsigned then signed
    (a topic nobody declared). SendMessage is one of popfront's framed calls to popack
    (popbroker.grpc.frontframes): the auth guard runs there too."""
    credentials = grpc.ssl_channel_credentials(root_certificates=ca)
    options = [("grpc.ssl_target_name_override", SERVER_NAME)]
    request = service.QueryRouteRequest(topic=definition.Resource(name="undeclared"))
    send = service.SendMessageRequest(
        messages=[
            definition.Message(
                topic=definition.Resource(name="undeclared"),
                system_properties=definition.SystemProperties(message_id="m-1"),
                body=b"x",
            )
        ]
    )
    async with grpc.aio.secure_channel(endpoint, credentials, options=options) as channel:
        stub = MessagingServiceStub(channel)
        unsigned = await stub.QueryRoute(
            request, metadata=(("x-mq-client-id", "tb-1"),), timeout=10
        )
        signed = await stub.QueryRoute(request, metadata=_signed(), timeout=10)
        unsigned_send = await stub.SendMessage(
            send, metadata=(("x-mq-client-id", "tb-1"),), timeout=10
        )
        signed_send = await stub.SendMessage(send, metadata=_signed(), timeout=10)
    return [
        unsigned.status.code,
        signed.status.code,
        unsigned_send.status.code,
        signed_send.status.code,
    ]


async def _plaintext_refused(endpoint: str) -> bool:
    """A plaintext call to the TLS-only client port fails at the transport."""
    request = service.QueryRouteRequest(topic=definition.Resource(name="undeclared"))
    async with grpc.aio.insecure_channel(endpoint) as channel:
        try:
            await MessagingServiceStub(channel).QueryRoute(request, metadata=_signed(), timeout=5)
        except grpc.aio.AioRpcError as exc:
            return bool(exc.code() == grpc.StatusCode.UNAVAILABLE)
    return False


def _scrape(ip: str, port: int) -> str:
    with urllib.request.urlopen(f"http://{ip}:{port}/metrics", timeout=10) as reply:
        return str(reply.read().decode())


def test_secured_broker_serves_tls_checks_signatures_and_counts(
    popfleet_release: cluster.Cluster, secured: tuple[str, bytes]
) -> None:
    ns, ca = secured
    story.wait_condition(popfleet_release, ns, "brokerclusters", CLUSTER, "Ready")
    (pod,) = story.broker_pods(popfleet_release, ns, CLUSTER)
    ip = cluster.Cluster.pod_ip(pod)
    endpoint = f"{ip}:{clientprotocol.CLIENT_PORT}"
    assert asyncio.run(_routes(endpoint, ca)) == [
        Code.UNAUTHORIZED,
        Code.TOPIC_NOT_FOUND,
        Code.UNAUTHORIZED,
        Code.TOPIC_NOT_FOUND,
    ]

    def counted() -> str | None:
        text = _scrape(ip, names.METRICS_PORTS["popack"])
        wanted = 'popfleet_broker_requests_total{code="UNAUTHORIZED",rpc="QueryRoute"}'
        return text if wanted in text else None

    waiting.until(counted, timeout_s=30, what="the refused route counted on popack's /metrics")
    assert "popfleet_store_flush_seconds_count" in _scrape(ip, names.METRICS_PORTS["store"])
    assert "popfleet_broker_revive_lag_messages" in _scrape(ip, names.METRICS_PORTS["revive"])
    front = _scrape(ip, names.METRICS_PORTS["front"])  # the refused routes passed through it
    assert 'popfleet_front_calls_total{code="OK",method="QueryRoute"}' in front, front[-2000:]
    # The sends went to popack framed, and the chain there counted them by their codes.
    upstream = [line for line in front.splitlines() if line.startswith("popfleet_front_upstream")]
    assert 'popfleet_front_upstream_calls_total{transport="framed"} 2' in upstream, upstream
    counted_sends = _scrape(ip, names.METRICS_PORTS["popack"])
    for code in ("UNAUTHORIZED", "TOPIC_NOT_FOUND"):
        assert f'popfleet_broker_requests_total{{code="{code}",rpc="SendMessage"}}' in counted_sends
    assert asyncio.run(_plaintext_refused(endpoint))
