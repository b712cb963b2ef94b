"""publishing: which ConsumerGroups get which status.audit patch and Event (pure bodies)."""

from __future__ import annotations

from typing import Any

from popfleet_audit import publishing
from popfleet_audit.findings import AuditSummary, GroupFindings

AUDITED_AT_MS = 1_795_000_000_000


def _cg(
    name: str, *, cluster: str = "fleet", group: str | None = None, status: str | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"clusterRef": {"name": cluster}}
    if group is not None:
        spec["groupName"] = group
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": spec,
    }
    if status is not None:
        body["status"] = {"audit": {"status": status}}
    return body


def _summary(**groups: GroupFindings) -> AuditSummary:
    return AuditSummary(
        run_id="audit-1", audited_at_ms=AUDITED_AT_MS, brokers=("h:1",), jobs=("lag", "revive"),
        groups=dict(groups),
    )  # fmt: skip


FULL = GroupFindings(
    "billing", status="ERR", lag_messages=16, time_lag_ms=4_000, in_flight_messages=3,
    revive_backlog=7,
)  # fmt: skip


def test_patch_carries_every_measured_field() -> None:
    [(name, patch, event)] = publishing.plan([_cg("billing")], "fleet", _summary(billing=FULL))
    assert name == "billing"
    assert patch == {
        "status": {
            "audit": {
                "lagMessages": 16,
                "timeLagMs": 4_000,
                "inFlightMessages": 3,
                "reviveBacklog": 7,
                "status": "ERR",
                "auditedAt": "2026-11-18T11:06:40Z",
                "run": "audit-1",
            }
        }
    }
    assert event is not None
    assert event["type"] == "Warning"
    assert event["reason"] == "AuditStatusChanged"
    assert event["involvedObject"] == {
        "apiVersion": "popfleet.io/v1alpha1",
        "kind": "ConsumerGroup",
        "name": "billing",
        "namespace": "ns",
        "uid": "uid-billing",
    }
    assert "none -> ERR" in event["message"]


def test_only_the_clusters_groups_with_findings_are_patched() -> None:
    items = [
        _cg("billing-cr", group="billing"),  # spec.groupName names the broker-side group
        _cg("billing", cluster="other"),  # another cluster's group of the same name
        _cg("silent"),  # nothing found about it: left alone
    ]
    actions = publishing.plan(items, "fleet", _summary(billing=FULL))
    assert [name for name, _, _ in actions] == ["billing-cr"]


def test_event_only_when_the_status_changes() -> None:
    same = publishing.plan([_cg("billing", status="ERR")], "fleet", _summary(billing=FULL))
    assert same[0][2] is None
    recovered = GroupFindings("billing", status="OK", lag_messages=0)
    [(_, _, event)] = publishing.plan(
        [_cg("billing", status="ERR")], "fleet", _summary(billing=recovered)
    )
    assert event is not None
    assert event["type"] == "Normal"
    assert "ERR -> OK" in event["message"]


def test_a_revive_only_run_leaves_lag_and_status_alone() -> None:
    backlog_only = GroupFindings("billing", revive_backlog=5)
    [(_, patch, event)] = publishing.plan(
        [_cg("billing", status="WARN")], "fleet", _summary(billing=backlog_only)
    )
    assert patch["status"]["audit"] == {
        "reviveBacklog": 5,
        "auditedAt": "2026-11-18T11:06:40Z",
        "run": "audit-1",
    }
    assert event is None
