"""templates/cleanup.yaml: the pre-delete hook that lets the operator finalize every CR.

Rendered with ``helm template``; what it does on a real uninstall is tested on the testbed
(tests/integration/operator/test_uninstall_leaves_nothing.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.operator.chart.rendering import CHART, by_kind, helm, hooks, one, render

Obj = dict[str, Any]
NAME = "rel-popfleet-cleanup"


def hook_annotations(doc: Obj) -> dict[str, str]:
    return dict(doc["metadata"].get("annotations") or {})


def container(docs: list[Obj]) -> Obj:
    (found,) = one(hooks(docs), "Job")["spec"]["template"]["spec"]["containers"]
    return dict(found)


def test_every_hook_object_runs_before_delete_and_rbac_comes_first() -> None:
    docs = hooks(render())
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "Job", "ServiceAccount"]
    for doc in docs:
        assert doc["metadata"]["name"] == NAME
        assert hook_annotations(doc)["helm.sh/hook"] == "pre-delete"
        policy = hook_annotations(doc)["helm.sh/hook-delete-policy"].split(",")
        assert sorted(policy) == ["before-hook-creation", "hook-succeeded"]
    weights = {d["kind"]: int(hook_annotations(d)["helm.sh/hook-weight"]) for d in docs}
    assert max(w for k, w in weights.items() if k != "Job") < weights["Job"]


def test_the_hook_may_only_list_and_delete_the_three_kinds() -> None:
    docs = hooks(render())
    (rule,) = one(docs, "ClusterRole")["rules"]
    assert rule == {
        "apiGroups": ["popfleet.io"],
        "resources": ["brokerclusters", "topics", "consumergroups"],
        "verbs": ["list", "delete"],
    }
    binding = one(docs, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == NAME
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": NAME, "namespace": "popfleet-system"}
    ]


def test_the_job_runs_the_operator_image_once_hardened_and_bounded() -> None:
    docs = render("cleanup.timeoutSeconds=100", "image.tag=dev")
    job = one(hooks(docs), "Job")
    pod = job["spec"]["template"]["spec"]
    found = container(docs)
    assert (
        found["image"]
        == one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    )
    assert found["image"].endswith(":dev")
    assert found["command"] == ["python", "-m", "popfleet_operator.uninstalling"]
    env = {e["name"]: e["value"] for e in found["env"]}
    assert env == {"POPFLEET_NAMESPACES": "", "POPFLEET_CLEANUP_TIMEOUT_S": "100"}
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["activeDeadlineSeconds"] > 100
    assert pod["restartPolicy"] == "Never" and pod["serviceAccountName"] == NAME
    assert found["securityContext"]["readOnlyRootFilesystem"] is True
    assert found["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["runAsNonRoot"] is True


def test_the_hook_pod_matches_neither_the_operator_selector_nor_its_network_policy() -> None:
    docs = render()
    labels = one(hooks(docs), "Job")["spec"]["template"]["metadata"]["labels"]
    selector = one(docs, "Deployment")["spec"]["selector"]["matchLabels"]
    assert not selector.items() <= labels.items()
    assert labels["app.kubernetes.io/name"] == "popfleet-cleanup"


def test_watched_namespaces_only() -> None:
    docs = hooks(render("operator.watchNamespaces={team-a,team-b}"))
    bindings = by_kind(docs, "RoleBinding")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    assert all(b["roleRef"]["name"] == NAME for b in bindings)
    assert not by_kind(docs, "ClusterRoleBinding")
    env = {e["name"]: e["value"] for e in container(docs)["env"]}
    assert env["POPFLEET_NAMESPACES"] == "team-a,team-b"


def test_can_be_turned_off() -> None:
    assert hooks(render("cleanup.enabled=false")) == []


@pytest.mark.parametrize("value", ["cleanup.timeoutSeconds=1", "cleanup.surprise=1"])
def test_schema_refuses_bad_cleanup_values(value: str) -> None:
    done = helm("template", "rel", str(CHART), "--kube-version", "1.33.0", "--set", value)
    assert done.returncode != 0
    assert "cleanup" in done.stderr
