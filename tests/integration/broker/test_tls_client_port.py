"""TLS on the client port (``--tls-cert/--tls-key``), with the official client's ``tls_enable``.

A self-signed certificate for 127.0.0.1/localhost is made in the test (with
``cryptography``). The official client trusts only gRPC's default roots, so it
runs in a child interpreter whose ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH`` names
that certificate (``tls_probe.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as definition
from rocketmq.grpc_protocol import service_pb2 as service
from rocketmq.grpc_protocol import service_pb2_grpc as service_grpc

from tests.integration.broker.certs import make_certificate
from tests.integration.broker.conftest import GROUP, GROUPS, TOPIC, TOPICS
from tests.integration.broker.harness import WITH_FRONT, BrokerProcess, endpoint_role

PROBE = Path(__file__).with_name("tls_probe.py")


@pytest.fixture(scope="module", params=WITH_FRONT)
def tls_broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[BrokerProcess, Path]]:
    work = tmp_path_factory.mktemp("tls")
    cert, key = make_certificate(work)
    role = endpoint_role(request.param)
    process = BrokerProcess.start(
        work / "broker", mode=str(request.param), topics=TOPICS, groups=GROUPS,
        extra_args={role: ["--tls-cert", str(cert), "--tls-key", str(key)]},
    )  # fmt: skip
    try:
        yield process, cert
    finally:
        process.stop()
        print(process.logs())


def run_probe(endpoint: str, ca: Path, *, tls: bool) -> dict[str, object]:
    env = {**os.environ, "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(ca)}
    result = subprocess.run(
        [sys.executable, str(PROBE), endpoint, TOPIC, GROUP, "1" if tls else "0"],
        capture_output=True, text=True, env=env, timeout=90, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    answer: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return answer


@pytest.mark.timeout(180)
def test_the_official_client_with_tls_enabled_sends_and_receives(
    tls_broker: tuple[BrokerProcess, Path],
) -> None:
    broker, ca = tls_broker
    answer = run_probe(broker.endpoint, ca, tls=True)
    assert "error" not in answer, answer
    assert answer["sent"] in answer["received"]  # type: ignore[operator]


@pytest.mark.timeout(180)
def test_a_plaintext_client_gets_nothing_from_the_tls_port(
    tls_broker: tuple[BrokerProcess, Path],
) -> None:
    broker, ca = tls_broker
    answer = run_probe(broker.endpoint, ca, tls=False)
    assert "route" in str(answer.get("error")), answer


async def test_the_server_certificate_is_the_one_configured(
    tls_broker: tuple[BrokerProcess, Path],
) -> None:
    broker, ca = tls_broker
    route = service.QueryRouteRequest(topic=definition.Resource(name=TOPIC))
    trusted = grpc.ssl_channel_credentials(root_certificates=ca.read_bytes())
    async with grpc.aio.secure_channel(broker.endpoint, trusted) as channel:
        answer = await service_grpc.MessagingServiceStub(channel).QueryRoute(route, timeout=10)
        assert answer.status.code == definition.Code.OK
    untrusted = grpc.ssl_channel_credentials()  # system roots: the self-signed cert is unknown
    async with grpc.aio.secure_channel(broker.endpoint, untrusted) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await service_grpc.MessagingServiceStub(channel).QueryRoute(route, timeout=5)
        assert failed.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_key_without_its_certificate_is_refused(tmp_path: Path) -> None:
    _, key = make_certificate(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "popbroker.cli", "all", "--data-dir", str(tmp_path / "data"),
         "--listen", "127.0.0.1:0", "--tls-key", str(key)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "--tls-cert and --tls-key go together" in result.stderr
