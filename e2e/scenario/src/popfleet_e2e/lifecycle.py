"""The chart's life in the story: ``helm install``, ``helm upgrade`` with a CRD change, uninstall.

* install: the chart from ``charts/popfleet`` (CRDs, operator, RBAC), ``--wait``.
* upgrade: a copy of the chart with a bumped version and one new optional field in the
  ConsumerGroup CRD (``spec.note``); the upgraded CRD must serve the field (a CR keeps it,
  where the old schema would prune it) and the operator must keep the group applied.
* uninstall: ``helm uninstall`` with the story's resources still there (the chart's pre-delete
  hook deletes them while the operator runs, so finalizers honour ``deletionPolicy``); nothing
  may be left but what the chart keeps on purpose: the CRDs (``crds.keep``, so users'
  resources survive) and the brokers' volume claims (the StatefulSet's ``whenDeleted:
  Retain``). ``remove_kept`` deletes those too.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from popfleet_e2e import conditions, waits
from popfleet_e2e.access import ClusterAccess, Obj, ScenarioError

CRDS = ("brokerclusters.popfleet.io", "topics.popfleet.io", "consumergroups.popfleet.io")
UPGRADE_VERSION = "0.1.1-e2e"
NEW_FIELD = "note"
GROUP_CRD_TEMPLATE = Path("templates/crds/popfleet.io_consumergroups.yaml")
RELEASE_LABEL = "app.kubernetes.io/instance"


def install_chart(access: ClusterAccess) -> str:
    _helm_upgrade_install(access, access.chart)
    release = _release(access)
    return f"release {access.release} {release['chart']} rev {release['revision']}"


def _helm_upgrade_install(access: ClusterAccess, chart: Path) -> None:
    sets = [a for value in access.helm_values for a in ("--set", value)]
    access.helm(
        "upgrade", "--install", access.release, str(chart), "-n", access.release_namespace,
        "--create-namespace", "--wait", "--timeout", "180s", *sets,
    )  # fmt: skip


def _release(access: ClusterAccess) -> Obj:
    out = access.helm("list", "-n", access.release_namespace, "-o", "json")
    for release in json.loads(out):
        if release["name"] == access.release:
            return dict(release)
    raise ScenarioError(f"no helm release {access.release} in {access.release_namespace}")


def upgraded_chart_copy(chart: Path, into: Path) -> Path:
    """A copy of ``chart`` at ``UPGRADE_VERSION`` whose ConsumerGroup CRD has ``spec.note``."""
    copy = into / chart.name
    shutil.copytree(chart, copy)
    meta = copy / "Chart.yaml"
    lines = meta.read_text().splitlines()
    versions = [i for i, line in enumerate(lines) if line.startswith("version:")]
    if len(versions) != 1:
        raise ScenarioError(f"{meta}: expected one 'version:' line")
    lines[versions[0]] = f"version: {UPGRADE_VERSION}"
    meta.write_text("\n".join(lines) + "\n")
    crd = copy / GROUP_CRD_TEMPLATE
    text = crd.read_text()
    anchor = "\n          spec:\n"
    spec_at = text.find(anchor)
    props_at = text.find("\n            properties:\n", spec_at)
    if spec_at < 0 or props_at < 0:
        raise ScenarioError(f"{crd}: cannot find spec.properties to add {NEW_FIELD}")
    insert_at = props_at + len("\n            properties:\n")
    field = (
        f"              {NEW_FIELD}:\n"
        "                type: string\n"
        "                maxLength: 256\n"
        "                description: Free text for people (added by the e2e upgrade).\n"
    )
    crd.write_text(text[:insert_at] + field + text[insert_at:])
    return copy


def upgrade_with_crd_change(access: ClusterAccess, *, group: str) -> str:
    """``helm upgrade`` to the bumped chart; the CRD serves the new field; the group stays on."""
    before = int(_release(access)["revision"])
    with tempfile.TemporaryDirectory(prefix="popfleet-chart-") as tmp:
        _helm_upgrade_install(access, upgraded_chart_copy(access.chart, Path(tmp)))
    release = _release(access)
    if int(release["revision"]) != before + 1 or not release["chart"].endswith(UPGRADE_VERSION):
        raise ScenarioError(f"helm upgrade did not take: {release}")
    crd = access.get("crd", CRDS[2], namespace=access.release_namespace)
    spec_props = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    if NEW_FIELD not in spec_props["properties"]:
        raise ScenarioError(f"the upgraded ConsumerGroup CRD has no spec.{NEW_FIELD}")
    access.merge_patch("consumergroup", group, {"spec": {NEW_FIELD: "upgraded by e2e"}})
    cg = conditions.wait(access, "consumergroup", group, "ModeApplied", timeout_s=120)
    if cg["spec"].get(NEW_FIELD) != "upgraded by e2e":
        raise ScenarioError(f"spec.{NEW_FIELD} was pruned: the CRD change is not served")
    return f"{release['chart']} rev {release['revision']}; spec.{NEW_FIELD} kept; ModeApplied"


def _leftovers(access: ClusterAccess) -> list[str]:
    """Everything the release or the story's resources could have left behind."""
    found: list[str] = []
    story_ns = (
        "statefulsets,deployments,pods,services,configmaps,secrets,serviceaccounts,"
        "poddisruptionbudgets,networkpolicies,jobs,cronjobs,roles,rolebindings,leases"
    )
    for ns in (access.namespace, access.release_namespace):
        for obj in access.items(story_ns, namespace=ns):
            name, kind = obj["metadata"]["name"], obj["kind"]
            if (kind, name) in {("ConfigMap", "kube-root-ca.crt"), ("ServiceAccount", "default")}:
                continue
            found.append(f"{kind} {ns}/{name}")
    selector = f"{RELEASE_LABEL}={access.release}"
    for obj in access.items("clusterroles,clusterrolebindings", namespace="*", selector=selector):
        found.append(f"{obj['kind']} {obj['metadata']['name']}")
    for kind in ("brokerclusters", "topics", "consumergroups"):
        if kind + ".popfleet.io" in _crd_names(access):
            found += [f"{kind} {o['metadata']['name']}" for o in access.items(kind, namespace="*")]
    return found


def _crd_names(access: ClusterAccess) -> set[str]:
    return {o["metadata"]["name"] for o in access.items("crds", namespace="*")}


def _kept_claims(access: ClusterAccess) -> list[str]:
    return [o["metadata"]["name"] for o in access.items("pvc")]


def uninstall_leaves_nothing(access: ClusterAccess) -> str:
    """``helm uninstall`` with the story's resources in place; only kept CRDs and claims remain.

    The chart's pre-delete hook deletes the BrokerClusters, Topics and ConsumerGroups and waits
    for the still-running operator to finalize them (deletion policies honoured).
    """
    access.helm(
        "uninstall", access.release, "-n", access.release_namespace, "--wait", "--timeout",
        "300s", timeout_s=330,
    )  # fmt: skip
    last: list[list[str]] = [[]]

    def clean() -> bool:
        last[0] = _leftovers(access)
        return not last[0]

    waits.until(clean, timeout_s=120, what="nothing left behind", seen=lambda: str(last[0]))
    kept = sorted(set(CRDS) & _crd_names(access))
    if kept and kept != sorted(CRDS):
        raise ScenarioError(f"only some CRDs were kept: {kept}")
    return f"nothing left but the kept CRDs {kept} and volume claims {_kept_claims(access)}"


def remove_kept(access: ClusterAccess) -> None:
    """Delete what uninstall keeps on purpose (CRDs, claims): a clean cluster for what follows."""
    access.kubectl("delete", "crd", *CRDS, "--ignore-not-found", "--timeout=120s", timeout_s=150)
    access.kubectl("delete", "pvc", "--all", "-n", access.namespace, "--timeout=120s")


def clean_up(access: ClusterAccess) -> list[str]:
    """After a run, failed or not: whatever is still there goes; the errors met, if any.

    The story's resources are deleted while the operator still runs (finalizers), then the
    release, then what the chart keeps. Each part is tried even when an earlier one failed.
    """
    problems: list[str] = []
    resources = "consumergroups,topics,brokerclusters"
    parts = (
        lambda: access.kubectl(
            "delete", resources, "--all", "-n", access.namespace, "--timeout=120s", timeout_s=150
        ),
        lambda: access.helm(
            "uninstall", access.release, "-n", access.release_namespace, "--ignore-not-found"
        ),
        lambda: remove_kept(access),
    )
    for part in parts:
        try:
            part()
        except ScenarioError as exc:
            problems.append(str(exc))
    return problems
