"""A replica's round that cannot talk to the API server says why in one line; a bug keeps its
traceback.

An API server that is not reached (a leader cut off by policy, an apiserver restarting) or
that refuses (a 403 while RBAC is being fixed) is an expected condition of a replicated set:
the round gives up, the next one tries again, and the log says what the API server answered,
with the Status message that names the user and verb of a 403, not a 60-line traceback per
second (the kind isolation step's log check caught exactly that). Anything else a round
raises is a bug and is logged with its traceback.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from kubernetes_asyncio import client, config

from popbroker.replicator.replica import Replica
from popfleet_testbed import cluster, controlplane
from tests.integration.replication.test_failover_on_apiserver import (
    DEADLINE_MS,
    LAG_MS,
    LEASE_MS,
    RETRY_MS,
    TOKEN,
    Clock,
)
from tests.integration.replication.test_follower_logs import _open


async def _replica(api: client.CoordinationV1Api, namespace: str, path: Path) -> Replica:
    return Replica(
        await _open(path), name="a", api=api, namespace=namespace, lease_name="broker-0",
        peers={"a": ("127.0.0.1", controlplane.free_port())}, token=TOKEN, clock_ms=Clock(),
        lease_ms=LEASE_MS, renew_deadline_ms=DEADLINE_MS, retry_ms=RETRY_MS,
        max_lag_ms=LAG_MS, min_in_sync=1, ack_timeout_s=1.0, round_timeout_s=5.0,
    )  # fmt: skip


def _round_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "round failed" in r.getMessage()]


async def test_an_api_server_not_reached_is_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    configuration = client.Configuration()
    configuration.host = f"https://127.0.0.1:{controlplane.free_port()}"  # nothing listens
    async with client.ApiClient(configuration) as api_client:
        replica = await _replica(client.CoordinationV1Api(api_client), "default", tmp_path)
        with caplog.at_level(logging.WARNING, logger="popbroker.replicator.replica"):
            assert await replica.bounded_round() is None
    [record] = _round_warnings(caplog)
    assert record.exc_info is None
    assert "API server not reached: ClientConnectorError" in record.getMessage()


async def test_a_refusal_names_the_status_and_its_message(
    testbed: cluster.Cluster,
    testbed_namespace: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    configuration = client.Configuration()
    await config.load_kube_config(
        config_file=str(testbed.kubeconfig), client_configuration=configuration
    )
    async with client.ApiClient(configuration) as api_client:
        api_client.set_default_header("Impersonate-User", "nobody")  # no rights: a real 403
        replica = await _replica(client.CoordinationV1Api(api_client), testbed_namespace, tmp_path)
        with caplog.at_level(logging.WARNING, logger="popbroker.replicator.replica"):
            assert await replica.bounded_round() is None
    [record] = _round_warnings(caplog)
    assert record.exc_info is None
    message = record.getMessage()
    assert "API server answered 403 Forbidden" in message
    assert 'User "nobody" cannot get resource "leases"' in message


async def test_a_bug_in_a_round_keeps_its_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    configuration = client.Configuration()
    configuration.host = f"https://127.0.0.1:{controlplane.free_port()}"
    async with client.ApiClient(configuration) as api_client:
        replica = await _replica(client.CoordinationV1Api(api_client), "default", tmp_path)

        async def broken() -> None:
            raise ZeroDivisionError

        monkeypatch.setattr(replica.coordinator, "step", broken)
        with caplog.at_level(logging.WARNING, logger="popbroker.replicator.replica"):
            assert await replica.bounded_round() is None
    [record] = _round_warnings(caplog)
    assert record.exc_info is not None and record.exc_info[0] is ZeroDivisionError
