"""Shared values for the operator's unit tests (pure functions and in-memory brokers)."""

from __future__ import annotations

import pytest

from popfleet_api.testing import InMemoryBrokerAdmin
from popfleet_operator.model import specs


@pytest.fixture
def owner() -> specs.ObjectRef:
    return specs.ObjectRef(
        kind="BrokerCluster",
        namespace="ns",
        name="demo",
        uid="uid-1",
        generation=3,
        created="2026-11-21T10:00:00Z",
    )


@pytest.fixture
def brokers() -> dict[str, InMemoryBrokerAdmin]:
    return {
        f"demo-{i}": InMemoryBrokerAdmin(f"memory:{i}", broker_name=f"demo-{i}") for i in range(3)
    }
