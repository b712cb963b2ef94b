"""The audit handler's status write: fresh read, precondition, nulls, conditions only on change."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from typing import Any

from popfleet_operator.clients import kube as kube_client
from popfleet_operator.errors import KubeError
from popfleet_operator.handlers import audits
from popfleet_operator.model import specs
from popfleet_operator.status import conditions as c

URL = "/apis/popfleet.io/v1alpha1/namespaces/ns/brokerclusters/demo"
HEALTHY = c.Condition("AuditHealthy", True, "AuditSucceeded", "run demo-audit-1 succeeded")


class RecordingKube(kube_client.Kube):
    """One BrokerCluster in memory; ``conflicts`` status patches fail with 409 first."""

    def __init__(self, body: dict[str, Any], *, conflicts: int = 0) -> None:
        super().__init__(api=None)
        self.body = body
        self.conflicts = conflicts
        self.patches: list[dict[str, Any]] = []

    async def get_or_none(self, url: str) -> dict[str, Any] | None:
        assert url == URL
        return copy.deepcopy(self.body)

    async def patch_merge(self, url: str, patch: dict[str, Any]) -> dict[str, Any]:
        assert url == f"{URL}/status"
        self.patches.append(patch)
        if self.conflicts:
            self.conflicts -= 1
            self.body["metadata"]["resourceVersion"] += "x"  # someone else wrote meanwhile
            raise KubeError("PATCH: 409 Conflict", status=409)
        return self.body


def cluster(audit: dict[str, Any], conditions: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {"name": "demo", "namespace": "ns", "resourceVersion": "7", "generation": 2},
        "status": {"audit": audit, "conditions": conditions},
    }


def write(kube: RecordingKube, audit: dict[str, Any]) -> None:
    owner = specs.ObjectRef("BrokerCluster", "ns", "demo", "uid-1", 2, "")

    def compute(old: Mapping[str, Any]) -> tuple[dict[str, Any], c.Condition]:
        return audit, HEALTHY

    asyncio.run(audits.patch_audit_status(kube, owner, compute))


def test_patch_carries_the_read_version_and_removes_dropped_keys() -> None:
    ready = {"type": "Ready", "status": "True", "reason": "AllBrokersReady", "message": ""}
    kube = RecordingKube(cluster({"active": "demo-audit-1", "waiting": "x"}, [ready]))
    write(kube, {"active": "", "lastRun": "demo-audit-1"})
    (patch,) = kube.patches
    assert patch["metadata"] == {"resourceVersion": "7"}
    assert patch["status"]["audit"] == {"active": "", "waiting": None, "lastRun": "demo-audit-1"}
    types = [x["type"] for x in patch["status"]["conditions"]]
    assert types == ["AuditHealthy", "Ready"]  # Ready kept as read, AuditHealthy added


def test_unchanged_condition_is_not_sent_and_nothing_new_sends_nothing() -> None:
    healthy = {
        "type": "AuditHealthy",
        "status": "True",
        "reason": "AuditSucceeded",
        "message": "run demo-audit-1 succeeded",
    }
    kube = RecordingKube(cluster({"lastRun": "a"}, [healthy]))
    write(kube, {"lastRun": "b"})
    (patch,) = kube.patches
    assert "conditions" not in patch["status"]
    quiet = RecordingKube(cluster({"lastRun": "b"}, [healthy]))
    write(quiet, {"lastRun": "b"})
    assert quiet.patches == []


def test_conflicts_are_retried_against_a_fresh_read_up_to_a_limit() -> None:
    kube = RecordingKube(cluster({}, []), conflicts=1)
    write(kube, {"lastRun": "demo-audit-1"})
    assert [p["metadata"]["resourceVersion"] for p in kube.patches] == ["7", "7x"]
    stubborn = RecordingKube(cluster({}, []), conflicts=audits.CONFLICT_ATTEMPTS + 1)
    write(stubborn, {"lastRun": "demo-audit-1"})  # gives up quietly: the next tick retries
    assert len(stubborn.patches) == audits.CONFLICT_ATTEMPTS
