"""Audit manifests: the Job (local and Kubernetes masters), the SparkApplication, the RBAC."""

from __future__ import annotations

from typing import Any

import pytest

from popfleet_operator.builders import audits
from popfleet_operator.errors import InvalidSpec
from popfleet_operator.model import names, specs

BROKERS = ("127.0.1.2:9877", "127.0.1.3:9877")


def run(**overrides: Any) -> audits.RunInputs:
    values: dict[str, Any] = {
        "name": "demo-audit-1763733600",
        "scheduled_at": "2026-11-21T14:00:00Z",
        "brokers": BROKERS,
    }
    values.update(overrides)
    return audits.RunInputs(**values)


def audit_spec(**raw: Any) -> specs.AuditSpec:
    return specs.parse_audit({"audit": {"enabled": True, **raw}})


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_local_master_job_runs_the_audit_cli_against_the_ready_brokers(
    owner: specs.ObjectRef,
) -> None:
    job = audits.job(owner, audit_spec(master="local[2]"), run())
    assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job"
    meta = job["metadata"]
    assert meta["name"] == "demo-audit-1763733600" and meta["namespace"] == "ns"
    assert meta["annotations"][names.AUDIT_SCHEDULED_AT] == "2026-11-21T14:00:00Z"
    assert meta["ownerReferences"][0]["uid"] == "uid-1"
    assert meta["ownerReferences"][0]["controller"] is True
    assert job["spec"]["backoffLimit"] == 0
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "demo-audit" and pod["restartPolicy"] == "Never"
    assert job["spec"]["template"]["metadata"]["labels"][names.AUDIT_ROLE_LABEL] == "audit"
    assert names.LABEL_CLUSTER not in job["spec"]["template"]["metadata"]["labels"]
    (container,) = pod["containers"]
    argv = container["command"]
    assert argv[:2] == ["popfleet-audit", "all"]
    assert flag(argv, "--brokers") == "127.0.1.2:9877,127.0.1.3:9877"
    assert flag(argv, "--master") == "local[2]"
    assert (flag(argv, "--namespace"), flag(argv, "--cluster")) == ("ns", "demo")
    assert flag(argv, "--run-id") == "demo-audit-1763733600"
    assert flag(argv, "--output") == "/var/lib/popfleet-audit/output"
    assert flag(argv, "--history") == "/var/lib/popfleet-audit/history"
    assert "--admin-token-file" not in argv
    assert {v["name"]: v for v in pod["volumes"]}["data"] == {"name": "data", "emptyDir": {}}
    assert container["resources"]["requests"] == {"cpu": "1", "memory": "512Mi"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_history_claim_and_admin_token_are_mounted(owner: specs.ObjectRef) -> None:
    spec = audit_spec(history={"claimName": "audit-history"})
    token = specs.SecretKeyRef("admin", "tok")
    job = audits.job(owner, spec, run(admin_token=token))
    pod = job["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"] == {"claimName": "audit-history"}
    assert volumes["admin-token"]["secret"] == {
        "secretName": "admin",
        "items": [{"key": "tok", "path": "token"}],
    }
    argv = pod["containers"][0]["command"]
    assert flag(argv, "--admin-token-file") == "/etc/popfleet-admin/token"
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["admin-token"] == "/etc/popfleet-admin" and mounts["data"].startswith("/var")


def test_kubernetes_master_job_spark_submits_in_client_mode(owner: specs.ObjectRef) -> None:
    spec = audit_spec(
        master="k8s://https://kubernetes.default.svc",
        spark={"executorInstances": 4, "executorMemory": "2g", "conf": {"spark.x": "1"}},
    )
    argv = audits.job(owner, spec, run())["spec"]["template"]["spec"]["containers"][0]["command"]
    assert argv[0] == "spark-submit"
    assert flag(argv, "--master") == "k8s://https://kubernetes.default.svc"
    assert flag(argv, "--deploy-mode") == "client"
    confs = dict(argv[i + 1].split("=", 1) for i, w in enumerate(argv) if w == "--conf")
    assert confs["spark.executor.instances"] == "4"
    assert confs["spark.executor.memory"] == "2g"
    assert confs["spark.kubernetes.namespace"] == "ns"
    assert confs["spark.kubernetes.executor.label.popfleet.io/role"] == "audit"
    assert confs["spark.driver.host"] == "$(POD_IP)" and confs["spark.x"] == "1"
    main = argv.index(names.AUDIT_MAIN_FILE)
    assert argv[main + 1] == "all" and "--master" not in argv[main:]


def test_spark_application_carries_the_same_job(owner: specs.ObjectRef) -> None:
    spec = audit_spec(spark={"driverCores": 2, "executorInstances": 3, "conf": {"spark.a": "b"}})
    app = audits.spark_application(owner, spec, run(run_now="v1"))
    assert app["apiVersion"] == "sparkoperator.k8s.io/v1beta2"
    assert app["kind"] == "SparkApplication"
    assert app["metadata"]["annotations"][names.AUDIT_RUN_NOW] == "v1"
    body = app["spec"]
    assert body["type"] == "Python" and body["mode"] == "cluster"
    assert body["mainApplicationFile"] == f"local://{names.AUDIT_MAIN_FILE}"
    assert body["arguments"][0] == "all" and "--master" not in body["arguments"]
    assert flag(body["arguments"], "--brokers") == ",".join(BROKERS)
    assert body["driver"]["serviceAccount"] == "demo-audit"
    assert (body["driver"]["cores"], body["executor"]["instances"]) == (2, 3)
    assert body["executor"]["labels"][names.AUDIT_ROLE_LABEL] == "audit"
    assert body["sparkConf"] == {"spark.a": "b"}
    assert body["restartPolicy"] == {"type": "Never"}


def test_audit_role_allows_only_group_reads_status_patches_and_events(
    owner: specs.ObjectRef,
) -> None:
    objects = audits.identity(owner, None)
    assert [o["kind"] for o in objects] == ["ServiceAccount", "Role", "RoleBinding"]
    rules = objects[1]["rules"]
    granted = {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == {
        ("popfleet.io", "consumergroups", "get"),
        ("popfleet.io", "consumergroups", "list"),
        ("popfleet.io", "consumergroups/status", "patch"),
        ("", "events", "create"),
        ("events.k8s.io", "events", "create"),
    }
    binding = objects[2]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "demo-audit",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "demo-audit", "namespace": "ns"}
    ]
    spark = audits.identity(owner, "rel-popfleet-audit-spark-driver")[-1]
    assert spark["roleRef"]["kind"] == "ClusterRole"
    assert spark["roleRef"]["name"] == "rel-popfleet-audit-spark-driver"
    assert all(o["metadata"]["ownerReferences"][0]["uid"] == "uid-1" for o in objects)


@pytest.mark.parametrize(
    ("spark", "kubernetes"), [("512m", "512Mi"), ("2g", "2Gi"), ("1024", "1024"), ("4Gb", "4Gi")]
)
def test_spark_memory_becomes_a_kubernetes_quantity(spark: str, kubernetes: str) -> None:
    assert audits.kubernetes_memory(spark) == kubernetes


def test_audit_spec_defaults_and_refusals() -> None:
    assert specs.parse_audit({}) == specs.AuditSpec()
    parsed = audit_spec(schedule="@hourly", backend="job", history={"failedRunsLimit": 0})
    assert (parsed.enabled, parsed.schedule, parsed.backend) == (True, "@hourly", "job")
    assert parsed.history.failed_runs_limit == 0 and parsed.history.claim_name is None
    assert not parsed.kubernetes_master
    assert audit_spec(master="k8s://https://10.0.0.1:6443").kubernetes_master
    for raw, where in (
        ({"master": "yarn"}, "spec.audit.master"),
        ({"master": "local[0]"}, "spec.audit.master"),
        ({"backend": "cronjob"}, "spec.audit.backend"),
        ({"spark": {"driverMemory": "1Gi"}}, "spec.audit.spark.driverMemory"),
        ({"spark": {"conf": {"executor.memory": "1g"}}}, "spec.audit.spark.conf"),
    ):
        with pytest.raises(InvalidSpec, match=where):
            audit_spec(**raw)
