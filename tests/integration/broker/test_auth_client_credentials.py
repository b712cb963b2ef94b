"""Client auth on the v2 endpoint (``--credentials-file``), with the official client.

Accounts (see ``popbroker.auth.accounts``): ``app`` may publish to and consume
``orders`` as ``billing``; ``reader`` may only subscribe to ``orders`` (so it
gets routes, but may neither send nor consume as ``billing``). The official
client signs every call; what it raises shows what the broker answered:
FORBIDDEN → ``ForbiddenException``. A wrong secret or no credentials fail
already at QueryRoute (the client logs that and raises "failed to fetch
route"), so the raw answers are also checked on the wire with the client's own
generated stub: ``status.code`` UNAUTHORIZED in the response body.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import grpc
import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer
from rocketmq.grpc_protocol import definition_pb2 as definition
from rocketmq.grpc_protocol import service_pb2 as service
from rocketmq.grpc_protocol import service_pb2_grpc as service_grpc
from rocketmq.v5.exception import ForbiddenException

from popbroker.auth import signature
from tests.integration.broker import officialclient as oc
from tests.integration.broker.conftest import GROUP, GROUPS, TOPIC, TOPICS
from tests.integration.broker.harness import WITH_FRONT, BrokerProcess, endpoint_role

ACCOUNTS = {
    "accounts": [
        {
            "accessKey": "app",
            "secretKey": "app-secret",
            "publish": [TOPIC],
            "subscribe": [TOPIC],
            "groups": [GROUP],
        },
        {"accessKey": "reader", "secretKey": "reader-secret", "subscribe": [TOPIC]},
    ]
}


def write_credentials(directory: Path) -> Path:
    path = directory / "credentials.json"
    path.write_text(json.dumps(ACCOUNTS))
    return path


@pytest.fixture(scope="module", params=WITH_FRONT)
def secured(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    work = tmp_path_factory.mktemp("secured")
    flags = ["--credentials-file", str(write_credentials(work))]
    role = endpoint_role(request.param)
    process = BrokerProcess.start(
        work / "broker", mode=str(request.param), topics=TOPICS, groups=GROUPS,
        extra_args={role: flags},
    )  # fmt: skip
    try:
        yield process
    finally:
        process.stop()
        print(process.logs())


def config(endpoint: str, ak: str = "", sk: str = "") -> Any:
    return ClientConfiguration(endpoint, Credentials(ak, sk), request_timeout=3)


def started_consumer(endpoint: str, ak: str, sk: str) -> Any:
    consumer = SimpleConsumer(
        config(endpoint, ak, sk), GROUP, {TOPIC: FilterExpression("*")}, await_duration=2
    )
    consumer.startup()
    return consumer


def test_a_signed_client_sends_receives_and_acks(secured: BrokerProcess) -> None:
    producer = Producer(config(secured.endpoint, "app", "app-secret"), (TOPIC,))
    producer.startup()
    try:
        sent = producer.send(oc.message(TOPIC, b"signed")).message_id
    finally:
        producer.shutdown()
    consumer = started_consumer(secured.endpoint, "app", "app-secret")
    try:
        got = oc.receive_until(consumer, 1, timeout_s=30)
        assert sent in [m.message_id for m in got]
        for message in got:
            consumer.ack(message)
    finally:
        consumer.shutdown()


def test_a_credential_without_permission_is_forbidden(secured: BrokerProcess) -> None:
    producer = Producer(config(secured.endpoint, "reader", "reader-secret"), (TOPIC,))
    producer.startup()  # the route is granted: reader may subscribe to the topic
    try:
        with pytest.raises(ForbiddenException) as refused:
            producer.send(oc.message(TOPIC, b"not allowed"))
        assert refused.value.code == definition.Code.FORBIDDEN
    finally:
        producer.shutdown()
    consumer = started_consumer(secured.endpoint, "reader", "reader-secret")
    try:
        with pytest.raises(ForbiddenException, match="group billing"):
            consumer.receive(1, 15)
    finally:
        consumer.shutdown()


@pytest.mark.parametrize(("ak", "sk"), [("app", "wrong"), ("", ""), ("nobody", "x")])
def test_wrong_missing_or_unknown_credentials_get_nothing(
    secured: BrokerProcess, ak: str, sk: str
) -> None:
    producer = Producer(config(secured.endpoint, ak, sk), (TOPIC,))
    producer.startup()
    try:
        with pytest.raises(Exception, match="route"):
            producer.send(oc.message(TOPIC, b"refused"))
    finally:
        producer.shutdown()


def _signed(
    ak: str, sk: str, date: str | None = None, *, client_id: str | None = None
) -> list[tuple[str, str]]:
    date = date or datetime.now().strftime(signature.DATE_FORMAT)  # local time, as the client
    auth = (
        f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, "
        f"Signature={signature.sign(sk, date)}"
    )
    client = client_id or f"wire-{ak}"
    return [("x-mq-date-time", date), ("authorization", auth), ("x-mq-client-id", client)]


async def test_the_wire_answers_in_the_response_body(secured: BrokerProcess) -> None:
    route = service.QueryRouteRequest(topic=definition.Resource(name=TOPIC))
    receive = service.ReceiveMessageRequest(
        group=definition.Resource(name=GROUP),
        message_queue=definition.MessageQueue(topic=definition.Resource(name=TOPIC), id=-1),
        batch_size=1,
    )
    async with grpc.aio.insecure_channel(secured.endpoint) as channel:
        stub = service_grpc.MessagingServiceStub(channel)
        cases = {
            "missing": [],
            "forged": _signed("app", "guessed"),
            "stale": _signed("app", "app-secret", "20200101T000000Z"),
            "garbage date": _signed("app", "app-secret", "not-a-date"),
            "truncated": [("authorization", "MQv2-HMAC-SHA1 Credential=app")],
        }
        for name, metadata in cases.items():
            answer = await stub.QueryRoute(route, metadata=metadata, timeout=5)
            assert answer.status.code == definition.Code.UNAUTHORIZED, name
            assert not answer.message_queues, name
        stream = [r async for r in stub.ReceiveMessage(receive, metadata=[], timeout=5)]
        assert [r.status.code for r in stream] == [definition.Code.UNAUTHORIZED]
        ok = await stub.QueryRoute(route, metadata=_signed("app", "app-secret"), timeout=5)
        assert ok.status.code == definition.Code.OK
        assert ok.message_queues
        forbidden = [
            r async for r in stub.ReceiveMessage(
                receive, metadata=_signed("reader", "reader-secret"), timeout=5
            )
        ]  # fmt: skip
        assert [r.status.code for r in forbidden] == [definition.Code.FORBIDDEN]
        assert "group billing" in forbidden[0].status.message
        borrowed = await stub.QueryRoute(
            route, metadata=_signed("reader", "reader-secret", client_id="wire-app"), timeout=5
        )  # reader may route the topic, but not as app's client
        assert borrowed.status.code == definition.Code.FORBIDDEN
        assert "another access key" in borrowed.status.message


async def test_telemetry_settings_for_a_forbidden_group_are_refused(
    secured: BrokerProcess,
) -> None:
    def settings() -> Any:
        subscription = definition.Subscription(
            group=definition.Resource(name=GROUP),
            subscriptions=[definition.SubscriptionEntry(topic=definition.Resource(name=TOPIC))],
        )
        return service.TelemetryCommand(
            settings=definition.Settings(
                client_type=definition.ClientType.SIMPLE_CONSUMER, subscription=subscription
            )
        )

    async with grpc.aio.insecure_channel(secured.endpoint) as channel:
        stub = service_grpc.MessagingServiceStub(channel)
        for (ak, sk), expected in [
            (("app", "app-secret"), definition.Code.OK),
            (("reader", "reader-secret"), definition.Code.FORBIDDEN),
        ]:
            call = stub.Telemetry(metadata=_signed(ak, sk), timeout=10)
            await call.write(settings())
            reply = await call.read()
            assert reply.status.code == expected, (ak, reply.status.message)
            await call.done_writing()
            call.cancel()
        unsigned = stub.Telemetry(metadata=[], timeout=10)
        await unsigned.write(settings())
        assert (await unsigned.read()).status.code == definition.Code.UNAUTHORIZED
        unsigned.cancel()


def test_a_bad_credentials_file_stops_the_role_with_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "credentials.yaml"
    bad.write_text("accounts:\n  - accessKey: app\n")  # no secret
    result = subprocess.run(
        [sys.executable, "-m", "popbroker.cli", "all", "--data-dir", str(tmp_path / "data"),
         "--listen", "127.0.0.1:0", "--credentials-file", str(bad)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "credentials.yaml" in result.stderr
    assert "secretKey" in result.stderr
    assert not (tmp_path / "data").exists()  # refused before the store was opened
