"""The npm ``rocketmq-client-nodejs`` 1.0.8 (official gRPC 5.x client) against the broker.

``nodeclient/produce_consume.mjs`` runs in ``node`` as a subprocess: its Producer sends
messages with a tag and keys, its SimpleConsumer receives and acks them, and it prints one
JSON line. The package lives in ``$POPFLEET_NODE_CLIENT_DIR`` or
``~/.cache/popfleet/node-client-1.0.8`` (``make node-client``, a prerequisite of
``make test``); the test fails when node or the package is absent. Loopback only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import grpc
import pytest
from rocketmq.grpc_protocol import service_pb2_grpc
from rocketmq.grpc_protocol.definition_pb2 import Code, Resource
from rocketmq.grpc_protocol.service_pb2 import QueryRouteRequest

from tests.integration.broker.conftest import GROUP, TOPIC
from tests.integration.broker.harness import WITH_FRONT, BrokerProcess

BROKER_MODES = WITH_FRONT  # also behind popfront (conftest)


SCRIPT = Path(__file__).parent / "nodeclient" / "produce_consume.mjs"
CLIENT_DIR = Path(
    os.environ.get(
        "POPFLEET_NODE_CLIENT_DIR", Path.home() / ".cache" / "popfleet" / "node-client-1.0.8"
    )
)
COUNT = 8
TAG = "node-tag"


def _run_node(broker: BrokerProcess) -> dict[str, Any]:
    node = shutil.which("node")
    package = CLIENT_DIR / "node_modules" / "rocketmq-client-nodejs" / "package.json"
    if node is None or not package.exists():
        pytest.fail(
            f"node ({node}) or rocketmq-client-nodejs 1.0.8 under {CLIENT_DIR} is missing; "
            "`make node-client` (a prerequisite of `make test`) installs the package"
        )
    done = subprocess.run(
        [node, str(SCRIPT), broker.endpoint, TOPIC, GROUP, TAG, str(COUNT)],
        capture_output=True,
        timeout=60,
        check=False,
        env={**os.environ, "POPFLEET_NODE_CLIENT_DIR": str(CLIENT_DIR)},
    )
    stderr = done.stderr.decode(errors="replace")[-4000:]
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout.decode()[-3000:]}\n{stderr}"
    result: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return result


def _healthy(broker: BrokerProcess) -> None:
    for name, proc in broker.roles.items():
        assert proc.poll() is None, f"{name} exited with {proc.returncode}"
    with grpc.insecure_channel(broker.endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        response = stub.QueryRoute(QueryRouteRequest(topic=Resource(name=TOPIC)), timeout=5)
    assert response.status.code == Code.OK
    assert response.message_queues


def test_nodejs_client_sends_receives_and_acks(broker: BrokerProcess) -> None:
    result = _run_node(broker)
    assert result["errors"] == []
    sent = {m["messageId"]: m for m in result["sent"]}
    assert len(sent) == COUNT
    received_ids = [m["messageId"] for m in result["received"]]
    assert sorted(received_ids) == sorted(sent), "every message exactly once"
    for message in result["received"]:
        origin = sent[message["messageId"]]
        assert message["body"] == origin["body"]
        assert message["tag"] == TAG
        assert message["keys"] == origin["keys"]
        assert message["topic"] == TOPIC
        assert message["deliveryAttempt"] == 1
        assert message["corrupted"] is False
    _healthy(broker)
