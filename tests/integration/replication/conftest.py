"""The replication tests that need a real kube-apiserver use the testbed's: its namespace
per test, and Kubernetes clients on it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import client, config

from popfleet_testbed import cluster
from popfleet_testbed.fixtures import testbed, testbed_namespace

__all__ = ["testbed", "testbed_namespace"]


@pytest.fixture
async def kube(testbed: cluster.Cluster) -> AsyncIterator[client.ApiClient]:
    """A client of the testbed's kube-apiserver."""
    configuration = client.Configuration()
    await config.load_kube_config(
        config_file=str(testbed.kubeconfig), client_configuration=configuration
    )
    async with client.ApiClient(configuration) as api_client:
        yield api_client


@pytest.fixture
def api(kube: client.ApiClient) -> client.CoordinationV1Api:
    """The Lease API."""
    return client.CoordinationV1Api(kube)


@pytest.fixture
def pods(kube: client.ApiClient) -> client.CoreV1Api:
    """The core API (pods)."""
    return client.CoreV1Api(kube)
