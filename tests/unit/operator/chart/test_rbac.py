"""templates/rbac.yaml: least privilege, cluster-wide or per watched namespace.

The uninstall hook's own RBAC (templates/cleanup.yaml) is tested in test_cleanup_hook.py.
"""

from __future__ import annotations

from tests.unit.operator.chart.rendering import by_kind, one, release_objects, render


def verbs(rules: list[dict[str, list[str]]], group: str, resource: str) -> set[str]:
    return {
        verb
        for rule in rules
        if group in rule["apiGroups"] and resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_namespaced_rules_are_exactly_what_the_operator_uses() -> None:
    rules = one(render(), "ClusterRole", "rel-popfleet")["rules"]
    assert verbs(rules, "popfleet.io", "topics") == {"get", "list", "watch", "patch"}
    assert verbs(rules, "popfleet.io", "topics/status") == {"get", "patch"}
    assert verbs(rules, "", "pods") == {"get", "list", "watch"}
    assert verbs(rules, "", "secrets") == {"get", "create"}  # create: replication tokens
    assert verbs(rules, "apps", "statefulsets") == {"get", "create", "patch"}
    for rule in rules:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
        if "delete" in rule["verbs"]:  # only audit runs beyond the history limits
            assert set(rule["resources"]) <= {"jobs", "sparkapplications"}


def test_audit_rules_cover_runs_identity_and_only_binding_the_driver_role() -> None:
    docs = render()
    rules = one(docs, "ClusterRole", "rel-popfleet")["rules"]
    assert verbs(rules, "batch", "jobs") == {"list", "create", "delete"}
    assert verbs(rules, "sparkoperator.k8s.io", "sparkapplications") == {
        "list",
        "create",
        "delete",
    }
    assert verbs(rules, "", "serviceaccounts") == {"get", "create", "patch"}
    for resource in ("roles", "rolebindings"):
        assert verbs(rules, "rbac.authorization.k8s.io", resource) == {"get", "create", "patch"}
    # The Role the operator creates for audit pods may only grant what the operator holds.
    assert {"get", "list"} <= verbs(rules, "popfleet.io", "consumergroups")
    assert "patch" in verbs(rules, "popfleet.io", "consumergroups/status")
    assert "create" in verbs(rules, "", "events")
    binds = [r for r in rules if "clusterroles" in r["resources"]]
    assert all(b["verbs"] == ["bind"] for b in binds)
    assert sorted(name for b in binds for name in b["resourceNames"]) == [
        "rel-popfleet-audit-spark-driver",
        "rel-popfleet-broker-replica",
    ]
    driver = one(docs, "ClusterRole", "rel-popfleet-audit-spark-driver")["rules"]
    assert "create" in verbs(driver, "", "pods") and "delete" in verbs(driver, "", "pods")
    assert verbs(rules, "", "pods") == {"get", "list", "watch"}  # the operator makes no pods
    (deployment,) = by_kind(docs, "Deployment")
    env = {
        e["name"]: e.get("value")
        for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["POPFLEET_AUDIT_SPARK_CLUSTERROLE"] == "rel-popfleet-audit-spark-driver"


def test_cluster_wide_by_default() -> None:
    docs = release_objects(render())
    bindings = {b["metadata"]["name"] for b in by_kind(docs, "ClusterRoleBinding")}
    assert bindings == {"rel-popfleet", "rel-popfleet-cluster"}
    assert not by_kind(docs, "RoleBinding")
    cluster_rules = one(docs, "ClusterRole", "rel-popfleet-cluster")["rules"]
    assert verbs(cluster_rules, "apiextensions.k8s.io", "customresourcedefinitions") == {
        "get",
        "list",
        "watch",
    }


def test_watched_namespaces_get_role_bindings() -> None:
    docs = release_objects(render("operator.watchNamespaces={team-a,team-b}"))
    bindings = by_kind(docs, "RoleBinding")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    assert {b["metadata"]["name"] for b in by_kind(docs, "ClusterRoleBinding")} == {
        "rel-popfleet-cluster"
    }
    peerings = by_kind(docs, "KopfPeering")
    assert sorted(p["metadata"]["namespace"] for p in peerings) == ["team-a", "team-b"]
    assert not by_kind(docs, "ClusterKopfPeering")


def test_replicas_may_elect_and_label_their_pods_which_the_operator_only_binds() -> None:
    docs = render()
    replica = one(docs, "ClusterRole", "rel-popfleet-broker-replica")["rules"]
    assert verbs(replica, "coordination.k8s.io", "leases") >= {"get", "create", "update"}
    assert verbs(replica, "", "pods") == {"get", "list", "patch"}
    operator = one(docs, "ClusterRole", "rel-popfleet")["rules"]
    # The operator owns the set Leases (apply), lists them for status and watches them to wake
    # the cluster on a failover; taking and renewing them (update) is the stores'.
    leases = verbs(operator, "coordination.k8s.io", "leases")
    assert leases == {"get", "list", "watch", "create", "patch"}
    assert "patch" not in verbs(operator, "", "pods")
    (deployment,) = by_kind(docs, "Deployment")
    env = {
        e["name"]: e.get("value")
        for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["POPFLEET_BROKER_REPLICA_CLUSTERROLE"] == "rel-popfleet-broker-replica"
