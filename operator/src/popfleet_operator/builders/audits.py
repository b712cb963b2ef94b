"""Audit runs and their identity: pure manifests from ``spec.audit`` and one run's inputs.

A run executes ``popfleet_audit`` (spark_operator_jobs/) against the cluster's brokers:

* **Job** (``batch/v1``), master ``local[...]`` (or ``spark://``): the container runs
  ``popfleet-audit all --master M ...``: driver and executors in the one pod.
* **Job**, master ``k8s://...``: the container runs ``spark-submit`` in client mode; the
  driver stays in the Job pod, executors are pods labelled like it (so the brokers'
  NetworkPolicy lets them reach the admin port). The driver needs pod rights: a RoleBinding
  to the chart's spark-driver ClusterRole (``spark_driver_binding``).
* **SparkApplication** (``sparkoperator.k8s.io/v1beta2``): the kubeflow Spark operator
  submits ``main.py`` in cluster mode with the same arguments; same RBAC as above.

Every run mounts one data volume at ``/var/lib/popfleet-audit`` (``output/`` for the report,
``history/`` for the Parquet history): the ``history.claimName`` PVC when set, else an
emptyDir (no history between runs). With a ``k8s://`` master executors write too, so the
claim must then be ReadWriteMany. The admin token Secret, when the cluster has one, is
mounted at ``/etc/popfleet-admin/token``.

The audit pods' own Role allows exactly: get/list ConsumerGroups, patch their status,
create Events.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from popfleet_operator.builders import meta
from popfleet_operator.model import names
from popfleet_operator.model.specs import AuditSpec, ObjectRef, SecretKeyRef

SPARK_VERSION = "4.3.0"  # the pyspark the audit package pins
ACTIVE_DEADLINE_S = 3600  # a hung run must not block the schedule forever (Forbid)
SPARK_API_VERSION = "sparkoperator.k8s.io/v1beta2"

AUDIT_RULES: list[dict[str, list[str]]] = [
    {"apiGroups": [names.GROUP], "resources": ["consumergroups"], "verbs": ["get", "list"]},
    {"apiGroups": [names.GROUP], "resources": ["consumergroups/status"], "verbs": ["patch"]},
    {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
]

_SPARK_UNITS = {"k": "Ki", "m": "Mi", "g": "Gi", "t": "Ti", "p": "Pi"}
_SPARK_MEMORY = re.compile(r"^([0-9]+)([kmgtp]?)b?$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class RunInputs:
    """What one run needs beyond the spec: its name, due time and the brokers to read."""

    name: str
    scheduled_at: str  # RFC 3339
    brokers: tuple[str, ...]  # admin endpoints HOST:PORT (status.brokers[].adminEndpoint)
    admin_token: SecretKeyRef | None = None
    run_now: str = ""  # the run-now annotation value it answers ("": started by the schedule)


def kubernetes_memory(spark_memory: str) -> str:
    """Spark's ``512m`` (MiB) as a Kubernetes quantity ``512Mi`` (where ``512m`` is milli)."""
    found = _SPARK_MEMORY.fullmatch(spark_memory)
    if found is None:
        raise ValueError(f"{spark_memory!r} is not a Spark memory size")
    number, unit = found.groups()
    return number + _SPARK_UNITS.get(unit.lower(), "") if unit else number


def service_account(owner: ObjectRef) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": meta.object_meta(owner, names.audit_identity(owner.name), component="audit"),
    }


def role(owner: ObjectRef) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": meta.object_meta(owner, names.audit_identity(owner.name), component="audit"),
        "rules": AUDIT_RULES,
    }


def _binding(owner: ObjectRef, name: str, role_ref: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": meta.object_meta(owner, name, component="audit"),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", **role_ref},
        "subjects": [
            {
                "kind": "ServiceAccount",
                "name": names.audit_identity(owner.name),
                "namespace": owner.namespace,
            }
        ],
    }


def role_binding(owner: ObjectRef) -> dict[str, Any]:
    name = names.audit_identity(owner.name)
    return _binding(owner, name, {"kind": "Role", "name": name})


def spark_driver_binding(owner: ObjectRef, cluster_role: str) -> dict[str, Any]:
    """The driver's pod rights for a Kubernetes master: the chart's ClusterRole, bound here."""
    name = f"{names.audit_identity(owner.name)}-spark"
    return _binding(owner, name, {"kind": "ClusterRole", "name": cluster_role})


def identity(owner: ObjectRef, spark_cluster_role: str | None) -> list[dict[str, Any]]:
    """ServiceAccount, Role, RoleBinding (+ the spark-driver binding), in apply order."""
    objects = [service_account(owner), role(owner), role_binding(owner)]
    if spark_cluster_role:
        objects.append(spark_driver_binding(owner, spark_cluster_role))
    return objects


def cli_args(owner: ObjectRef, run: RunInputs) -> list[str]:
    """``popfleet_audit`` arguments after the program name (the ``all`` job, both audits)."""
    args = [
        "all",
        "--brokers",
        ",".join(run.brokers),
        "--output",
        f"{names.AUDIT_DATA_MOUNT}/output",
        "--history",
        f"{names.AUDIT_DATA_MOUNT}/history",
        "--namespace",
        owner.namespace,
        "--cluster",
        owner.name,
        "--run-id",
        run.name,  # ConsumerGroup status.audit.run names this Job or SparkApplication
    ]
    if run.admin_token is not None:
        args += ["--admin-token-file", f"{names.ADMIN_TOKEN_MOUNT}/token"]
    return args


def _run_meta(owner: ObjectRef, run: RunInputs) -> dict[str, Any]:
    return {
        "name": run.name,
        "namespace": owner.namespace,
        "labels": names.audit_labels(owner.name),
        "annotations": {
            names.AUDIT_SCHEDULED_AT: run.scheduled_at,
            names.AUDIT_RUN_NOW: run.run_now,
        },
        "ownerReferences": [meta.owner_reference(owner)],
    }


def _volumes(spec: AuditSpec, run: RunInputs) -> list[dict[str, Any]]:
    claim = spec.history.claim_name
    volumes: list[dict[str, Any]] = [
        {"name": "data", "persistentVolumeClaim": {"claimName": claim}}
        if claim
        else {"name": "data", "emptyDir": {}},
        {"name": "tmp", "emptyDir": {}},
    ]
    if run.admin_token is not None:
        volumes.append(
            {
                "name": "admin-token",
                "secret": {
                    "secretName": run.admin_token.name,
                    "items": [{"key": run.admin_token.key, "path": "token"}],
                },
            }
        )
    return volumes


def _mounts(run: RunInputs) -> list[dict[str, Any]]:
    mounts: list[dict[str, Any]] = [
        {"name": "data", "mountPath": names.AUDIT_DATA_MOUNT},
        {"name": "tmp", "mountPath": "/tmp"},  # noqa: S108 - an emptyDir, not the host's /tmp
    ]
    if run.admin_token is not None:
        mounts.append(
            {"name": "admin-token", "mountPath": names.ADMIN_TOKEN_MOUNT, "readOnly": True}
        )
    return mounts


def _spark_conf(owner: ObjectRef, spec: AuditSpec, run: RunInputs) -> dict[str, str]:
    """Settings for a Kubernetes master (Job in client mode); the user's ``conf`` wins."""
    conf = {
        "spark.kubernetes.namespace": owner.namespace,
        "spark.kubernetes.container.image": spec.image,
        "spark.kubernetes.authenticate.driver.serviceAccountName": names.audit_identity(owner.name),
        "spark.kubernetes.driver.pod.name": "$(POD_NAME)",  # executors owned by the Job pod
        "spark.kubernetes.executor.podNamePrefix": run.name,
        f"spark.kubernetes.executor.label.{names.AUDIT_ROLE_LABEL}": "audit",
        "spark.driver.host": "$(POD_IP)",
        "spark.driver.bindAddress": "0.0.0.0",  # noqa: S104 - inside the pod, executors dial it
        "spark.driver.cores": str(spec.spark.driver_cores),
        "spark.executor.instances": str(spec.spark.executor_instances),
        "spark.executor.memory": spec.spark.executor_memory,
    }
    return {**conf, **spec.spark.conf}


def command(owner: ObjectRef, spec: AuditSpec, run: RunInputs) -> list[str]:
    """The Job container's command: ``popfleet-audit`` or, for ``k8s://``, ``spark-submit``."""
    if not spec.kubernetes_master:
        return ["popfleet-audit", *cli_args(owner, run), "--master", spec.master]
    submit = ["spark-submit", "--master", spec.master, "--deploy-mode", "client"]
    submit += ["--name", run.name, "--driver-memory", spec.spark.driver_memory]
    for key, value in sorted(_spark_conf(owner, spec, run).items()):
        submit += ["--conf", f"{key}={value}"]
    return [*submit, names.AUDIT_MAIN_FILE, *cli_args(owner, run)]


def _container(owner: ObjectRef, spec: AuditSpec, run: RunInputs) -> dict[str, Any]:
    memory = kubernetes_memory(spec.spark.driver_memory)
    return {
        "name": "audit",
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "command": command(owner, spec, run),
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ],
        "resources": {"requests": {"cpu": str(spec.spark.driver_cores), "memory": memory}},
        "volumeMounts": _mounts(run),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }


def _pod_security() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": names.SPARK_UID,
        "runAsGroup": names.SPARK_UID,
        "fsGroup": names.SPARK_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def job(owner: ObjectRef, spec: AuditSpec, run: RunInputs) -> dict[str, Any]:
    """One run as a Job: no retries (the next schedule is the retry), Forbid kept by us."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _run_meta(owner, run),
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": ACTIVE_DEADLINE_S,
            "template": {
                "metadata": {"labels": names.audit_labels(owner.name)},
                "spec": {
                    "serviceAccountName": names.audit_identity(owner.name),
                    "restartPolicy": "Never",
                    "securityContext": _pod_security(),
                    "containers": [_container(owner, spec, run)],
                    "volumes": _volumes(spec, run),
                },
            },
        },
    }


def _spark_pod(owner: ObjectRef, run: RunInputs, *, cores: int, memory: str) -> dict[str, Any]:
    return {
        "cores": cores,
        "memory": memory,
        "labels": names.audit_labels(owner.name),
        "volumeMounts": _mounts(run),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "runAsUser": names.SPARK_UID,
        },
    }


def spark_application(owner: ObjectRef, spec: AuditSpec, run: RunInputs) -> dict[str, Any]:
    """One run as a kubeflow SparkApplication (cluster mode; the Spark operator submits it)."""
    spark = spec.spark
    driver = _spark_pod(owner, run, cores=spark.driver_cores, memory=spark.driver_memory)
    driver["serviceAccount"] = names.audit_identity(owner.name)
    executor = _spark_pod(owner, run, cores=1, memory=spark.executor_memory)
    executor["instances"] = spark.executor_instances
    return {
        "apiVersion": SPARK_API_VERSION,
        "kind": "SparkApplication",
        "metadata": _run_meta(owner, run),
        "spec": {
            "type": "Python",
            "pythonVersion": "3",
            "mode": "cluster",
            "image": spec.image,
            "imagePullPolicy": "IfNotPresent",
            "mainApplicationFile": f"local://{names.AUDIT_MAIN_FILE}",
            "arguments": cli_args(owner, run),
            "sparkVersion": SPARK_VERSION,
            "sparkConf": dict(spec.spark.conf),
            "restartPolicy": {"type": "Never"},
            "volumes": _volumes(spec, run),
            "driver": driver,
            "executor": executor,
        },
    }
