"""ConsumerGroup ``status.audit`` patches and status-change Events, as plain bodies (pure).

:mod:`popfleet_audit.kube` sends them. Rules:

  1. The ConsumerGroups audited are those of the namespace whose
     ``spec.clusterRef.name`` is the audited cluster; the broker-side group
     name is ``spec.groupName``, else ``metadata.name``.
  2. A group the run found nothing about (no offsets, no checkpoints, no retry
     or DLQ figures) is not patched: "unknown" never overwrites a finding.
  3. The patch is a JSON merge patch of ``status.audit`` carrying only what the
     run measured (the fields of the CRD: lagMessages, timeLagMs,
     inFlightMessages, reviveBacklog, status, auditedAt, run).
  4. An Event goes out when the group status differs from the one the CR
     carried (a first audit counts as a change): ``Normal`` for OK, else
     ``Warning``; reason ``AuditStatusChanged``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from popfleet_audit.findings import AuditSummary, GroupFindings

API_GROUP = "popfleet.io"
API_VERSION = "v1alpha1"
PLURAL = "consumergroups"
KIND = "ConsumerGroup"
EVENT_REASON = "AuditStatusChanged"
COMPONENT = "popfleet-audit"


def group_name(cg: Mapping[str, Any]) -> str:
    return str(cg.get("spec", {}).get("groupName") or cg["metadata"]["name"])


def audited_groups(items: Iterable[Mapping[str, Any]], cluster: str) -> list[Mapping[str, Any]]:
    return [cg for cg in items if cg.get("spec", {}).get("clusterRef", {}).get("name") == cluster]


def audit_status(findings: GroupFindings, summary: AuditSummary) -> dict[str, Any]:
    audit: dict[str, Any] = {"auditedAt": summary.audited_at, "run": summary.run_id}
    for key, value in (
        ("lagMessages", findings.lag_messages),
        ("timeLagMs", findings.time_lag_ms),
        ("inFlightMessages", findings.in_flight_messages),
        ("reviveBacklog", findings.revive_backlog),
        ("status", findings.status),
    ):
        if value is not None:
            audit[key] = value
    return audit


def status_patch(findings: GroupFindings, summary: AuditSummary) -> dict[str, Any]:
    return {"status": {"audit": audit_status(findings, summary)}}


def previous_status(cg: Mapping[str, Any]) -> str | None:
    value = cg.get("status", {}).get("audit", {}).get("status")
    return str(value) if value is not None else None


def status_event(
    cg: Mapping[str, Any], findings: GroupFindings, summary: AuditSummary
) -> dict[str, Any] | None:
    """The core/v1 Event for a status change, or None when the status is unchanged or unknown."""
    new, old = findings.status, previous_status(cg)
    if new is None or new == old:
        return None
    meta = cg["metadata"]
    message = (
        f"audit {summary.run_id}: status {old or 'none'} -> {new} "
        f"(lag {findings.lag_messages}, time lag {findings.time_lag_ms} ms, "
        f"in flight {findings.in_flight_messages}, revive backlog {findings.revive_backlog})"
    )
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.audit.", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": f"{API_GROUP}/{API_VERSION}",
            "kind": KIND,
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid"),
        },
        "reason": EVENT_REASON,
        "message": message,
        "type": "Normal" if new == "OK" else "Warning",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": summary.run_id,
        "firstTimestamp": summary.audited_at,
        "lastTimestamp": summary.audited_at,
        "count": 1,
    }


def plan(
    items: Iterable[Mapping[str, Any]], cluster: str, summary: AuditSummary
) -> list[tuple[str, dict[str, Any], dict[str, Any] | None]]:
    """(CR name, status patch, Event or None) for every audited ConsumerGroup with findings."""
    actions = []
    for cg in audited_groups(items, cluster):
        findings = summary.groups.get(group_name(cg))
        if findings is None:
            continue
        actions.append(
            (
                str(cg["metadata"]["name"]),
                status_patch(findings, summary),
                status_event(cg, findings, summary),
            )
        )
    return actions
