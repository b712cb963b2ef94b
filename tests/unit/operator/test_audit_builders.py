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
        "items": [{"key": "tok", "path": "tok"}],
    }
    argv = pod["containers"][0]["command"]
    # the Secret's key is the file name: the same path where Spark mounts the whole Secret
    assert flag(argv, "--admin-token-file") == "/etc/popfleet-admin/tok"
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["admin-token"] == "/etc/popfleet-admin" and mounts["data"].startswith("/var")


def test_the_job_pods_cpu_request_follows_sparks_driver_request_setting(
    owner: specs.ObjectRef,
) -> None:
    spec = audit_spec(
        spark={"driverCores": 2, "conf": {"spark.kubernetes.driver.request.cores": "200m"}}
    )
    container = audits.job(owner, spec, run())["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["requests"]["cpu"] == "200m"
    assert flag(container["command"], "--conf") == "spark.kubernetes.driver.request.cores=200m"


def test_local_master_job_passes_the_users_spark_conf(owner: specs.ObjectRef) -> None:
    spec = audit_spec(master="local[2]", spark={"conf": {"spark.sql.shuffle.partitions": "8"}})
    argv = audits.job(owner, spec, run())["spec"]["template"]["spec"]["containers"][0]["command"]
    assert argv[0] == "popfleet-audit"
    assert flag(argv, "--conf") == "spark.sql.shuffle.partitions=8"


def test_kubernetes_master_job_spark_submits_in_client_mode(owner: specs.ObjectRef) -> None:
    spec = audit_spec(
        master="k8s://https://kubernetes.default.svc",
        spark={
            "executorInstances": 4,
            "executorCores": 2,
            "executorMemory": "2g",
            "conf": {"spark.x": "1", "spark.ui.enabled": "true"},
        },
    )
    token = specs.SecretKeyRef("admin", "tok")
    job = audits.job(owner, spec, run(admin_token=token))
    argv = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert argv[0] == "spark-submit"
    assert flag(argv, "--master") == "k8s://https://kubernetes.default.svc"
    assert flag(argv, "--deploy-mode") == "client"
    confs = dict(argv[i + 1].split("=", 1) for i, w in enumerate(argv) if w == "--conf")
    assert confs["spark.executor.instances"] == "4"
    assert confs["spark.executor.cores"] == "2"
    assert confs["spark.executor.memory"] == "2g"
    assert confs["spark.kubernetes.namespace"] == "ns"
    # executors: labelled like every audit pod (the brokers' NetworkPolicy), built from the
    # image's template (non-root, read-only root), an identity with no rights, the token
    assert confs["spark.kubernetes.executor.label.popfleet.io/role"] == "audit"
    assert confs["spark.kubernetes.executor.label.app.kubernetes.io/instance"] == "demo"
    assert confs["spark.kubernetes.executor.podTemplateFile"] == (
        f"{names.AUDIT_POD_TEMPLATES}/executor.yaml"
    )
    assert confs["spark.kubernetes.executor.podTemplateContainerName"] == "spark"
    assert (
        confs["spark.kubernetes.authenticate.executor.serviceAccountName"] == "demo-audit-executor"
    )
    assert confs["spark.kubernetes.authenticate.driver.serviceAccountName"] == "demo-audit"
    assert confs["spark.kubernetes.executor.secrets.admin"] == "/etc/popfleet-admin"
    assert confs["spark.kubernetes.driver.pod.name"] == "$(POD_NAME)"
    assert confs["spark.kubernetes.driver.ownPersistentVolumeClaim"] == "false"  # no PVC rights
    assert confs["spark.kubernetes.driver.reusePersistentVolumeClaim"] == "false"
    assert confs["spark.driver.host"] == "$(POD_IP)" and confs["spark.x"] == "1"
    assert confs["spark.driver.bindAddress"] == "$(POD_IP)"  # never 0.0.0.0: executors dial it
    assert confs["spark.ui.enabled"] == "true"  # the user's conf wins
    main = argv.index(names.AUDIT_MAIN_FILE)
    assert argv[main + 1] == "all" and "--master" not in argv[main:]


def test_spark_application_carries_the_same_job(owner: specs.ObjectRef) -> None:
    spec = audit_spec(
        spark={
            "driverCores": 2,
            "executorInstances": 3,
            "executorCores": 2,
            "conf": {"spark.a": "b"},
        }
    )
    token = specs.SecretKeyRef("admin", "tok")
    app = audits.spark_application(owner, spec, run(run_now="v1", admin_token=token))
    assert app["apiVersion"] == "sparkoperator.k8s.io/v1beta2"
    assert app["kind"] == "SparkApplication"
    assert app["metadata"]["annotations"][names.AUDIT_RUN_NOW] == "v1"
    body = app["spec"]
    assert body["type"] == "Python" and body["mode"] == "cluster"
    assert body["mainApplicationFile"] == f"local://{names.AUDIT_MAIN_FILE}"
    assert body["arguments"][0] == "all" and "--master" not in body["arguments"]
    assert flag(body["arguments"], "--brokers") == ",".join(BROKERS)
    assert flag(body["arguments"], "--admin-token-file") == "/etc/popfleet-admin/tok"
    assert body["driver"]["serviceAccount"] == "demo-audit"
    assert (body["driver"]["cores"], body["executor"]["instances"]) == (2, 3)
    assert body["executor"]["cores"] == 2
    assert body["executor"]["labels"][names.AUDIT_ROLE_LABEL] == "audit"
    assert body["restartPolicy"] == {"type": "Never"}
    conf = body["sparkConf"]
    assert conf["spark.a"] == "b"
    # pod shape through spark-submit's own settings (no admission webhook needed)
    assert conf["spark.kubernetes.driver.podTemplateFile"] == (
        f"{names.AUDIT_POD_TEMPLATES}/driver.yaml"
    )
    assert conf["spark.kubernetes.executor.podTemplateFile"] == (
        f"{names.AUDIT_POD_TEMPLATES}/executor.yaml"
    )
    assert (
        conf["spark.kubernetes.driver.volumes.emptyDir.data.mount.path"] == names.AUDIT_DATA_MOUNT
    )
    assert conf["spark.kubernetes.driver.secrets.admin"] == "/etc/popfleet-admin"
    assert conf["spark.kubernetes.executor.secrets.admin"] == "/etc/popfleet-admin"
    assert (
        conf["spark.kubernetes.authenticate.executor.serviceAccountName"] == "demo-audit-executor"
    )
    assert conf["spark.kubernetes.driver.label.popfleet.io/role"] == "audit"


def test_spark_application_mounts_the_history_claim_on_the_driver(owner: specs.ObjectRef) -> None:
    spec = audit_spec(history={"claimName": "audit-history"})
    conf = audits.spark_application(owner, spec, run())["spec"]["sparkConf"]
    prefix = "spark.kubernetes.driver.volumes.persistentVolumeClaim.data"
    assert conf[f"{prefix}.mount.path"] == names.AUDIT_DATA_MOUNT
    assert conf[f"{prefix}.options.claimName"] == "audit-history"
    assert not any(".emptyDir." in key for key in conf)
    assert not any(key.startswith("spark.kubernetes.executor.volumes") for key in conf)


def test_executors_get_an_identity_with_no_token_and_no_binding(owner: specs.ObjectRef) -> None:
    objects = audits.identity(owner, "popfleet-audit-spark-driver")
    assert [o["kind"] for o in objects] == [
        "ServiceAccount", "Role", "RoleBinding", "RoleBinding", "ServiceAccount"
    ]  # fmt: skip
    executor = objects[-1]
    assert executor["metadata"]["name"] == "demo-audit-executor"
    assert executor["automountServiceAccountToken"] is False
    subjects = {s["name"] for o in objects if o["kind"] == "RoleBinding" for s in o["subjects"]}
    assert subjects == {"demo-audit"}


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
    spark = audits.identity(owner, "rel-popfleet-audit-spark-driver")[3]
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
