"""The audit's ConsumerGroup status patches and Events on a real kube-apiserver (testbed).

Publishing needs no Spark: an :class:`AuditSummary` as a run makes it is published with
``kube.publish`` through the testbed's kubeconfig, as the audit pod does in-cluster. The
ConsumerGroup CRD comes from crds/ (the single source); it is installed for this test only
when the testbed has none, and removed again so a later Helm install can own it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from popfleet_audit import config as configuration
from popfleet_audit import kube
from popfleet_audit.findings import AuditSummary, GroupFindings
from popfleet_testbed import cluster

CRD = Path(__file__).resolve().parents[3] / "crds" / "popfleet.io_consumergroups.yaml"
CRD_NAME = "consumergroups.popfleet.io"

pytestmark = pytest.mark.timeout(300)  # the first testbed test of a session starts it


@pytest.fixture
def consumergroup_crd(testbed: cluster.Cluster) -> Iterator[cluster.Cluster]:
    existing = testbed.kubectl("get", "crd", "--ignore-not-found", "-o", "name", CRD_NAME)
    if not existing.strip():
        testbed.kubectl("apply", "-f", str(CRD))
    testbed.kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")
    yield testbed
    if not existing.strip():
        testbed.kubectl("delete", "crd", CRD_NAME, "--wait=true", timeout_s=120)


def _cg(name: str, cluster_name: str, *, group: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"clusterRef": {"name": cluster_name}, "topics": [{"name": "orders"}]}
    if group:
        spec["groupName"] = group
    return {
        "apiVersion": "popfleet.io/v1alpha1",
        "kind": "ConsumerGroup",
        "metadata": {"name": name},
        "spec": spec,
    }


def _summary(run_id: str, status: str, lag: int) -> AuditSummary:
    findings = GroupFindings(
        "billing", status=status, lag_messages=lag, time_lag_ms=4_000, in_flight_messages=3,
        revive_backlog=7,
    )  # fmt: skip
    return AuditSummary(
        run_id=run_id, audited_at_ms=1_795_000_000_000, brokers=("127.0.0.1:1",),
        jobs=("lag", "revive"), groups={"billing": findings},
    )  # fmt: skip


def _publish(testbed: cluster.Cluster, namespace: str, summary: AuditSummary, out: Path) -> int:
    config = configuration.parse_args(
        [
            "all", "--brokers", "127.0.0.1:1", "--output", str(out),
            "--namespace", namespace, "--cluster", "fleet",
            "--kubeconfig", str(testbed.kubeconfig),
        ]
    )  # fmt: skip
    return kube.publish(config, summary)


def _column(table: str, name: str) -> str:
    """A cell of kubectl's one-row table (fixed-width columns; some cells are empty)."""
    header, row = table.rstrip("\n").splitlines()
    starts = [(m.group(), m.start()) for m in re.finditer(r"\S+", header)]
    for index, (column, start) in enumerate(starts):
        if column == name:
            end = starts[index + 1][1] if index + 1 < len(starts) else len(row)
            return row[start:end].strip()
    raise KeyError(name)


def _audit_events(testbed: cluster.Cluster, namespace: str) -> list[dict[str, Any]]:
    events = json.loads(testbed.kubectl("get", "events", "-n", namespace, "-o", "json"))
    return [e for e in events["items"] if e["reason"] == "AuditStatusChanged"]


def test_status_audit_patched_printer_columns_and_events(
    consumergroup_crd: cluster.Cluster, testbed_namespace: str, tmp_path: Path
) -> None:
    testbed, namespace = consumergroup_crd, testbed_namespace
    testbed.apply(
        namespace,
        _cg("billing-cr", "fleet", group="billing"),
        _cg("billing", "elsewhere"),  # same broker-side name, another cluster: untouched
    )
    assert _publish(testbed, namespace, _summary("run-1", "ERR", 16), tmp_path) == 1

    patched = json.loads(testbed.kubectl("get", "cg", "-n", namespace, "billing-cr", "-o", "json"))
    assert patched["status"]["audit"] == {
        "lagMessages": 16,
        "timeLagMs": 4_000,
        "inFlightMessages": 3,
        "reviveBacklog": 7,
        "status": "ERR",
        "auditedAt": "2026-11-18T11:06:40Z",
        "run": "run-1",
    }
    other = json.loads(testbed.kubectl("get", "cg", "-n", namespace, "billing", "-o", "json"))
    assert "audit" not in other.get("status", {})
    table = testbed.kubectl("get", "cg", "-n", namespace, "billing-cr", "-o", "wide")
    assert (_column(table, "LAG"), _column(table, "BACKLOG"), _column(table, "AUDIT")) == (
        "16",
        "7",
        "ERR",
    )

    [event] = _audit_events(testbed, namespace)
    assert event["involvedObject"]["name"] == "billing-cr"
    assert event["type"] == "Warning"
    assert "none -> ERR" in event["message"]

    # The same status again: the figures move, no new Event. A change: one more Event.
    _publish(testbed, namespace, _summary("run-2", "ERR", 20), tmp_path)
    assert len(_audit_events(testbed, namespace)) == 1
    _publish(testbed, namespace, _summary("run-3", "OK", 0), tmp_path)
    events = _audit_events(testbed, namespace)
    assert sorted(e["type"] for e in events) == ["Normal", "Warning"]
    final = json.loads(testbed.kubectl("get", "cg", "-n", namespace, "billing-cr", "-o", "json"))
    assert (final["status"]["audit"]["status"], final["status"]["audit"]["run"]) == ("OK", "run-3")
