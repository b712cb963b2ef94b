"""Audit runs and their identity: pure manifests from ``spec.audit`` and one run's inputs.

A run executes ``popfleet_audit`` (spark_operator_jobs/) against the cluster's brokers:

* **Job** (``batch/v1``), master ``local[...]`` (or ``spark://``): the container runs
  ``popfleet-audit all --master M --conf K=V ...``: driver and executors in the one pod;
* **Job**, master ``k8s://...``: the container runs ``spark-submit --deploy-mode client``:
  the driver stays in the Job pod (``spark.driver.host`` its pod IP, the executors dial it),
  Spark creates the executor pods from the audit image (its entry point speaks Spark's pod
  contract) and the image's executor pod template (non-root, read-only root, ``/tmp`` an
  emptyDir, no service account token); executors are owned by the driver pod, so they go
  with it. The driver's rights: a RoleBinding to the chart's spark-driver ClusterRole
  (``spark_driver_binding``: pods, services, configmaps in this namespace);
* **SparkApplication** (``sparkoperator.k8s.io/v1beta2``): the Spark operator's
  spark-submit starts the driver pod (cluster mode) from the image's driver template; the
  same executor settings, RBAC and secrets as above, all as ``sparkConf`` (pod templates and
  Spark's own volume and secret settings: no admission webhook needed).

Executors run as ``<cluster>-audit-executor``, a ServiceAccount no role is bound to, whose
token is not mounted. They only read brokers (labelled like every audit pod, so the
brokers' NetworkPolicy admits them to the admin port) and never write a file the run keeps:
the reports and the history are written by the driver. So only the driver mounts the data
volume at ``/var/lib/popfleet-audit`` (``output/``, ``history/``): the ``history.claimName``
PVC when set (ReadWriteOnce is enough), else an emptyDir. The admin token Secret, when the
cluster has one, is mounted at ``/etc/popfleet-admin`` in the driver and every executor.

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


def executor_service_account(owner: ObjectRef) -> dict[str, Any]:
    """The executors' identity: bound to nothing, and its token is never mounted."""
    name = names.audit_executor_identity(owner.name)
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": meta.object_meta(owner, name, component="audit"),
        "automountServiceAccountToken": False,
    }


def identity(owner: ObjectRef, spark_cluster_role: str | None) -> list[dict[str, Any]]:
    """ServiceAccount, Role, RoleBinding (+ the spark-driver binding and the executors'
    ServiceAccount for runs with Spark's Kubernetes backend), in apply order."""
    objects = [service_account(owner), role(owner), role_binding(owner)]
    if spark_cluster_role:
        objects += [
            spark_driver_binding(owner, spark_cluster_role),
            executor_service_account(owner),
        ]
    return objects


def token_file(token: SecretKeyRef) -> str:
    """Where the admin token is read in every audit pod (the Secret's key as the file name)."""
    return f"{names.ADMIN_TOKEN_MOUNT}/{token.key}"


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
        args += ["--admin-token-file", token_file(run.admin_token)]
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
                    "items": [{"key": run.admin_token.key, "path": run.admin_token.key}],
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


def executor_conf(owner: ObjectRef, spec: AuditSpec, run: RunInputs) -> dict[str, str]:
    """Spark's Kubernetes settings for the executors (and their driver's rights), any mode."""
    spark = spec.spark
    conf = {
        "spark.kubernetes.namespace": owner.namespace,
        "spark.kubernetes.container.image": spec.image,
        "spark.kubernetes.container.image.pullPolicy": "IfNotPresent",
        "spark.kubernetes.authenticate.driver.serviceAccountName": names.audit_identity(owner.name),
        "spark.kubernetes.authenticate.executor.serviceAccountName": (
            names.audit_executor_identity(owner.name)
        ),
        "spark.kubernetes.executor.podNamePrefix": run.name,
        "spark.kubernetes.executor.podTemplateFile": (f"{names.AUDIT_POD_TEMPLATES}/executor.yaml"),
        "spark.kubernetes.executor.podTemplateContainerName": names.SPARK_CONTAINER,
        "spark.executor.instances": str(spark.executor_instances),
        "spark.executor.cores": str(spark.executor_cores),
        "spark.executor.memory": spark.executor_memory,
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        # No on-demand volume claims: the driver neither lists claims to reuse nor deletes
        # any at the end (it holds no right to persistentvolumeclaims).
        "spark.kubernetes.driver.ownPersistentVolumeClaim": "false",
        "spark.kubernetes.driver.reusePersistentVolumeClaim": "false",
    }
    for key, value in names.audit_labels(owner.name).items():
        conf[f"spark.kubernetes.executor.label.{key}"] = value
    if run.admin_token is not None:
        conf[f"spark.kubernetes.executor.secrets.{run.admin_token.name}"] = names.ADMIN_TOKEN_MOUNT
    return conf


def _spark_conf(owner: ObjectRef, spec: AuditSpec, run: RunInputs) -> dict[str, str]:
    """Settings for a Kubernetes master (Job, client mode); the user's ``conf`` wins."""
    conf = {
        **executor_conf(owner, spec, run),
        "spark.kubernetes.driver.pod.name": "$(POD_NAME)",  # executors owned by the Job pod
        # Bound to and advertised as the pod IP: Spark 4 may hand executors the bind address
        # (spark.kubernetes.executor.useDriverPodIP), so it must be one they can dial.
        "spark.driver.host": "$(POD_IP)",
        "spark.driver.bindAddress": "$(POD_IP)",
        "spark.driver.cores": str(spec.spark.driver_cores),
    }
    return {**conf, **spec.spark.conf}


def command(owner: ObjectRef, spec: AuditSpec, run: RunInputs) -> list[str]:
    """The Job container's command: ``popfleet-audit`` or, for ``k8s://``, ``spark-submit``."""
    if not spec.kubernetes_master:
        conf = [
            part for key, value in spec.spark.conf.items() for part in ("--conf", f"{key}={value}")
        ]
        return ["popfleet-audit", *cli_args(owner, run), "--master", spec.master, *conf]
    submit = ["spark-submit", "--master", spec.master, "--deploy-mode", "client"]
    submit += ["--name", run.name, "--driver-memory", spec.spark.driver_memory]
    for key, value in sorted(_spark_conf(owner, spec, run).items()):
        submit += ["--conf", f"{key}={value}"]
    return [*submit, names.AUDIT_MAIN_FILE, *cli_args(owner, run)]


def driver_request_cpu(spec: AuditSpec) -> str:
    """The Job pod's CPU request: Spark's ``spark.kubernetes.driver.request.cores`` when the
    user's ``conf`` sets it (as Spark reads it for a driver pod it creates), else the driver's
    cores; ``spark.driver.cores`` stays what the driver schedules with."""
    return spec.spark.conf.get(
        "spark.kubernetes.driver.request.cores", str(spec.spark.driver_cores)
    )


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
        "resources": {"requests": {"cpu": driver_request_cpu(spec), "memory": memory}},
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


def _driver_conf(owner: ObjectRef, spec: AuditSpec, run: RunInputs) -> dict[str, str]:
    """Cluster mode: the driver pod from the image's template, its data volume and token."""
    conf = {
        "spark.kubernetes.driver.podTemplateFile": f"{names.AUDIT_POD_TEMPLATES}/driver.yaml",
        "spark.kubernetes.driver.podTemplateContainerName": names.SPARK_CONTAINER,
    }
    for key, value in names.audit_labels(owner.name).items():
        conf[f"spark.kubernetes.driver.label.{key}"] = value
    claim = spec.history.claim_name
    volume = "spark.kubernetes.driver.volumes."
    if claim:
        conf[f"{volume}persistentVolumeClaim.data.mount.path"] = names.AUDIT_DATA_MOUNT
        conf[f"{volume}persistentVolumeClaim.data.options.claimName"] = claim
    else:
        conf[f"{volume}emptyDir.data.mount.path"] = names.AUDIT_DATA_MOUNT
    if run.admin_token is not None:
        conf[f"spark.kubernetes.driver.secrets.{run.admin_token.name}"] = names.ADMIN_TOKEN_MOUNT
    return conf


def spark_application(owner: ObjectRef, spec: AuditSpec, run: RunInputs) -> dict[str, Any]:
    """One run as a kubeflow SparkApplication (cluster mode; the Spark operator submits it).

    Everything pod-shaped travels as ``sparkConf`` that spark-submit itself applies (pod
    templates, volumes, secrets, labels), so it holds without the Spark operator's mutating
    webhook; the user's ``conf`` wins.
    """
    spark = spec.spark
    labels = names.audit_labels(owner.name)
    conf = {**executor_conf(owner, spec, run), **_driver_conf(owner, spec, run)}
    return {
        "apiVersion": SPARK_API_VERSION,
        "kind": "SparkApplication",
        "metadata": _run_meta(owner, run),
        "spec": {
            "type": "Python",
            "mode": "cluster",
            "image": spec.image,
            "imagePullPolicy": "IfNotPresent",
            "mainApplicationFile": f"local://{names.AUDIT_MAIN_FILE}",
            "arguments": cli_args(owner, run),
            "sparkVersion": SPARK_VERSION,
            "sparkConf": {**conf, **spark.conf},
            "restartPolicy": {"type": "Never"},
            "driver": {
                "cores": spark.driver_cores,
                "memory": spark.driver_memory,
                "serviceAccount": names.audit_identity(owner.name),
                "labels": labels,
            },
            "executor": {
                "instances": spark.executor_instances,
                "cores": spark.executor_cores,
                "memory": spark.executor_memory,
                "labels": labels,
            },
        },
    }
