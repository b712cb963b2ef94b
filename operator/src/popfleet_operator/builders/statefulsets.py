"""The broker StatefulSet: one pod per broker, four containers sharing one volume.

Pod layout (DESIGN §3):

* ``store`` owns the data volume (``/data``), serves the store API on the Unix socket
  ``/data/store.sock`` and the admin API on ``$(POD_IP):9877``; its gRPC health is the
  pod's readiness and liveness (it answers only once the store is open and writable).
* ``front`` (``popfront``, the compiled front end: docs/design/2026-11-27-compiled-front-end.md)
  owns the client port ``$(POD_IP):8081`` and its TLS, and forwards every call to popack's
  Unix socket ``/data/popack.sock``; its gRPC health probe goes through to popack's, so the
  pod is ready when popack serves (a TCP probe when TLS is on: kubelet probes speak no TLS).
* ``popack`` serves RocketMQ v2 clients behind the front end and advertises
  ``$(POD_IP):8081`` in routes; its liveness is its metrics endpoint.
* ``revive`` redelivers expired checkpoints; it has no client port and fails by exiting.
* Every role serves Prometheus ``/metrics`` on ``$(POD_IP)`` (ports ``metrics-store``,
  ``metrics-popack``, ``metrics-revive``: 9100-9102); the pod's ``prometheus.io/*``
  annotations name popack's, a PodMonitor can list all three port names.
* What the spec declares reaches popack: ``spec.auth.credentialsSecret`` (key
  ``credentials.yaml``) mounted read-only → ``--credentials-file``; ``spec.pop`` → the POP
  tuning flags; and the front: ``spec.tls.secretName`` (``tls.crt``/``tls.key``) →
  ``-tls-cert/-tls-key``.

popack and revive exit when the store socket is not there yet; the restart back-off covers
the first second of a pod's life. Every container runs as a non-root user on a read-only
root filesystem with no capabilities; the only writable paths are the data volume and an
emptyDir ``/tmp``. Pods start in parallel (brokers do not depend on each other).

Updates roll one pod at a time under the operator's control: ``rollingUpdate.partition``
comes from ``planning.rollout`` every round (0 on creation and when nothing is rolling).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from popfleet_operator.builders import meta
from popfleet_operator.model import names
from popfleet_operator.model.specs import ClusterSpec, ObjectRef, Resources

GRACE_S = 30
# A replicated set's Lease timings (the store's --lease-ms, --renew-deadline-ms, --retry-ms).
# A leader that dies without handing over is replaced after the lease time plus a round, and
# a leader cut off from the API server refuses writes after the renew deadline: 6 s / 4 s /
# 1 s keep an unplanned failover inside 15 s with the clients' reconnect (the broker's own
# defaults, 15 / 10 / 2 s, are for a store run by hand). Each replica then reads and writes
# its Lease once a second: three calls a second per set.
LEASE_MS, RENEW_DEADLINE_MS, RETRY_MS = 6_000, 4_000, 1_000


def _env(spec: ClusterSpec) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]
    if spec.replication.enabled:  # the pod's ordinal: its broker set (module docstring)
        pod_index = f"metadata.labels['{names.LABEL_POD_INDEX}']"
        env.append({"name": "POD_INDEX", "valueFrom": {"fieldRef": {"fieldPath": pod_index}}})
    return env


def _security_context() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }


def _resources(spec: ClusterSpec, role: str) -> dict[str, Any]:
    res = spec.resources.get(role, Resources())
    out: dict[str, Any] = {}
    if res.requests:
        out["requests"] = dict(res.requests)
    if res.limits:
        out["limits"] = dict(res.limits)
    return out


def _mounts(spec: ClusterSpec, role: str) -> list[dict[str, Any]]:
    mounts: list[dict[str, Any]] = [
        {"name": "data", "mountPath": names.DATA_MOUNT},
        {"name": "config", "mountPath": names.CONFIG_MOUNT, "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},  # noqa: S108 - an emptyDir, not the host's /tmp
    ]
    if spec.admin_token is not None:
        mounts.append(
            {"name": "admin-token", "mountPath": names.ADMIN_TOKEN_MOUNT, "readOnly": True}
        )
    if role == "store" and spec.replication.enabled:
        mounts.append(
            {"name": "replication", "mountPath": names.REPLICATION_TOKEN_MOUNT, "readOnly": True}
        )
    if role == "popack" and spec.credentials_secret is not None:
        mounts.append(
            {"name": "credentials", "mountPath": names.CREDENTIALS_MOUNT, "readOnly": True}
        )
    return mounts


def _metrics(role: str) -> tuple[list[str], dict[str, Any]]:
    """The role's ``--metrics-listen`` flag and its named container port."""
    port = names.METRICS_PORTS[role]
    flag = f"--metrics-listen=$(POD_IP):{port}"
    return [flag], {"name": f"metrics-{role}", "containerPort": port, "protocol": "TCP"}


def _container(spec: ClusterSpec, role: str, args: list[str]) -> dict[str, Any]:
    metrics_flags, metrics_port = _metrics(role)
    container: dict[str, Any] = {
        "name": role,
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "args": [role, *args, *metrics_flags],
        "env": _env(spec),
        "volumeMounts": _mounts(spec, role),
        "securityContext": _security_context(),
        "ports": [metrics_port],
    }
    resources = _resources(spec, role)
    if resources:
        container["resources"] = resources
    return container


def leader_label_selector(cluster: str) -> str:
    """The pods of one broker set (the one of ``$(POD_INDEX)``) across the replica
    StatefulSets: the cluster's selector and the ordinal label the StatefulSet controller
    sets. The set's leader takes the leader label off every other pod this matches."""
    labels = {**names.selector_labels(cluster), names.LABEL_POD_INDEX: "$(POD_INDEX)"}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def replication_args(owner: ObjectRef, spec: ClusterSpec) -> list[str]:
    """The store role's replication flags, the same for every pod of every replica
    StatefulSet: what differs per set comes from ``$(POD_INDEX)`` (module docstring)."""
    cluster, ns = owner.name, "$(POD_NAMESPACE)"
    pods = [
        f"{names.replica_statefulset(cluster, r)}-$(POD_INDEX)"
        for r in range(spec.replication.replicas)
    ]
    domain = f"{names.headless_service(cluster)}.{ns}.svc"
    peers = ",".join(f"{pod}={pod}.{domain}:{names.REPLICATION_PORT}" for pod in pods)
    return [
        "--replica-name=$(POD_NAME)",
        f"--replica-peers={peers}",
        f"--replication-listen=$(POD_IP):{names.REPLICATION_PORT}",
        f"--lease-namespace={ns}",
        f"--lease-name={cluster}-$(POD_INDEX)",
        f"--replication-token-file={names.REPLICATION_TOKEN_MOUNT}/token",
        f"--replication-mode={spec.replication.mode}",
        f"--min-in-sync-replicas={spec.replication.min_in_sync_replicas}",
        f"--lease-ms={LEASE_MS}",
        f"--renew-deadline-ms={RENEW_DEADLINE_MS}",
        f"--retry-ms={RETRY_MS}",
        f"--client-endpoint={cluster}-$(POD_INDEX).{ns}.svc:{names.CLIENT_PORT}",
        f"--leader-label-selector={leader_label_selector(cluster)}",
        f"--leader-file={names.LEADER_FILE}",
    ]


def store_container(owner: ObjectRef, spec: ClusterSpec) -> dict[str, Any]:
    replicated = spec.replication.enabled
    args = [
        f"--data-dir={names.STORE_DATA_DIR}",
        f"--socket={names.STORE_SOCKET}",
        f"--admin-listen=$(POD_IP):{names.ADMIN_PORT}",
        f"--cluster={owner.name}",
        # Every replica of set i stores broker NAME-i (replica 0's pod name, as unreplicated).
        f"--broker-name={owner.name}-$(POD_INDEX)" if replicated else "--broker-name=$(POD_NAME)",
        f"--flush-mode={spec.flush_mode.value.lower()}",
        "--settings-json=" + json.dumps({"revive_queue_num": spec.revive_queue_num}),
    ]
    if spec.admin_token is not None:
        args.append(f"--admin-token-file={names.ADMIN_TOKEN_MOUNT}/token")
    if replicated:
        args += replication_args(owner, spec)
    container = _container(spec, "store", args)
    grpc_probe = {"port": names.ADMIN_PORT}
    container["ports"].insert(
        0, {"name": "admin", "containerPort": names.ADMIN_PORT, "protocol": "TCP"}
    )
    if replicated:
        container["ports"].insert(
            1,
            {"name": "replication", "containerPort": names.REPLICATION_PORT, "protocol": "TCP"},
        )
    container["startupProbe"] = {"grpc": grpc_probe, "periodSeconds": 1, "failureThreshold": 300}
    container["readinessProbe"] = {"grpc": grpc_probe, "periodSeconds": 2, "failureThreshold": 2}
    container["livenessProbe"] = {"grpc": grpc_probe, **spec.liveness.timings()}
    return container


def _popack_edge_args(spec: ClusterSpec) -> list[str]:
    """Client auth, TLS and POP tuning, as the BrokerCluster declares them."""
    args = [
        f"--pop-ck-stay-ms={spec.pop.ck_stay_buffer_time_ms}",
        f"--pop-ck-max-buffer={spec.pop.ck_max_buffer_size}",
        f"--max-parked-requests={spec.pop.long_polling_max_requests}",
    ]
    if spec.credentials_secret is not None:
        args.append(f"--credentials-file={names.CREDENTIALS_MOUNT}/{names.CREDENTIALS_KEY}")
    return args


def popack_container(spec: ClusterSpec) -> dict[str, Any]:
    args = [
        f"--store-socket={names.STORE_SOCKET}",
        f"--data-dir={names.STORE_DATA_DIR}",
        f"--listen=unix:{names.FRONT_SOCKET}",
        f"--advertise=$(POD_IP):{names.CLIENT_PORT}",
        *_popack_edge_args(spec),
    ]
    container = _container(spec, "popack", args)
    container["livenessProbe"] = {
        "httpGet": {"path": "/metrics", "port": names.METRICS_PORTS["popack"]},
        **spec.liveness.timings(),
        "initialDelaySeconds": 10,
    }
    return container


def front_container(spec: ClusterSpec) -> dict[str, Any]:
    """popfront on the client port, forwarding to popack's socket (module docstring)."""
    args = [
        f"-listen=$(POD_IP):{names.CLIENT_PORT}",
        f"-upstream=unix://{names.FRONT_SOCKET}",
        f"-metrics-listen=$(POD_IP):{names.METRICS_PORTS['front']}",
    ]
    mounts: list[dict[str, Any]] = [{"name": "data", "mountPath": names.DATA_MOUNT}]
    ports = [{"name": "client", "containerPort": names.CLIENT_PORT, "protocol": "TCP"}]
    if spec.replication.enabled:
        args += [
            f"-leader-listen=$(POD_IP):{names.LEADER_PORT}",
            f"-leader-file={names.LEADER_FILE}",
        ]
        ports.append({"name": "leader", "containerPort": names.LEADER_PORT, "protocol": "TCP"})
    if spec.tls_secret is not None:
        args += [f"-tls-cert={names.TLS_MOUNT}/tls.crt", f"-tls-key={names.TLS_MOUNT}/tls.key"]
        mounts.append({"name": "tls", "mountPath": names.TLS_MOUNT, "readOnly": True})
        probe: dict[str, Any] = {"tcpSocket": {"port": names.CLIENT_PORT}}
    else:
        probe = {"grpc": {"port": names.CLIENT_PORT}}
    container: dict[str, Any] = {
        "name": "front",
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": [names.FRONT_COMMAND],
        "args": args,
        "env": _env(spec),
        "volumeMounts": mounts,
        "securityContext": _security_context(),
        "ports": [
            *ports,
            {
                "name": "metrics-front",
                "containerPort": names.METRICS_PORTS["front"],
                "protocol": "TCP",
            },
        ],
        "readinessProbe": {**probe, "periodSeconds": 2},
        "livenessProbe": {**probe, **spec.liveness.timings(), "initialDelaySeconds": 10},
    }
    resources = _resources(spec, "front")
    if resources:
        container["resources"] = resources
    return container


def revive_container(spec: ClusterSpec) -> dict[str, Any]:
    return _container(
        spec,
        "revive",
        [f"--store-socket={names.STORE_SOCKET}", f"--data-dir={names.STORE_DATA_DIR}"],
    )


def _volumes(owner: ObjectRef, spec: ClusterSpec) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": names.configmap(owner.name)}},
        {"name": "tmp", "emptyDir": {}},
    ]
    if spec.admin_token is not None:
        volumes.append(
            {
                "name": "admin-token",
                "secret": {
                    "secretName": spec.admin_token.name,
                    "items": [{"key": spec.admin_token.key, "path": "token"}],
                },
            }
        )
    if spec.replication.enabled:
        volumes.append(
            {
                "name": "replication",
                "secret": {
                    "secretName": names.replication_secret(owner.name),
                    "items": [{"key": "token", "path": "token"}],
                },
            }
        )
    if spec.credentials_secret is not None:
        volumes.append(
            {
                "name": "credentials",
                "secret": {
                    "secretName": spec.credentials_secret,
                    "items": [{"key": names.CREDENTIALS_KEY, "path": names.CREDENTIALS_KEY}],
                },
            }
        )
    if spec.tls_secret is not None:
        volumes.append(
            {
                "name": "tls",
                "secret": {
                    "secretName": spec.tls_secret,
                    "items": [
                        {"key": "tls.crt", "path": "tls.crt"},
                        {"key": "tls.key", "path": "tls.key"},
                    ],
                },
            }
        )
    return volumes


def _pod_annotations(config_hash: str) -> dict[str, str]:
    return {
        names.CONFIG_HASH: config_hash,
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(names.METRICS_PORTS["popack"]),
        "prometheus.io/path": "/metrics",
    }


def _claim(spec: ClusterSpec) -> dict[str, Any]:
    claim_spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": spec.storage_size}},
    }
    if spec.storage_class:
        claim_spec["storageClassName"] = spec.storage_class
    return {"metadata": {"name": "data"}, "spec": claim_spec}


def _spread(owner: ObjectRef) -> dict[str, Any]:
    """Replicas of one set on different nodes when the scheduler can (preferred): pods of
    this cluster with the same ordinal (``matchLabelKeys``, on by default since 1.31)."""
    term = {
        "labelSelector": {"matchLabels": names.selector_labels(owner.name)},
        "matchLabelKeys": [names.LABEL_POD_INDEX],
        "topologyKey": "kubernetes.io/hostname",
    }
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": term}
            ]
        }
    }


def template(
    owner: ObjectRef, spec: ClusterSpec, *, config_hash: str, replica: int = 0
) -> dict[str, Any]:
    """The pod template: any change of it is a new controller revision (a rolling update).
    ``replica``: which StatefulSet of a replicated cluster (0: ``NAME``)."""
    labels = names.labels(owner.name)
    labels.update(names.replica_selector_labels(owner.name, replica))
    replicated = spec.replication.enabled
    extra: dict[str, Any] = {"affinity": _spread(owner)} if replicated else {}
    return {
        "metadata": {
            "labels": labels,
            "annotations": _pod_annotations(config_hash),
        },
        "spec": {
            **extra,
            "serviceAccountName": names.service_account(owner.name),
            # A replica's store takes its set's Lease and labels its pod (the API's token);
            # an unreplicated broker never calls the API.
            "automountServiceAccountToken": replicated,
            "terminationGracePeriodSeconds": GRACE_S,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": names.BROKER_UID,
                "runAsGroup": names.BROKER_UID,
                "fsGroup": names.BROKER_UID,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                store_container(owner, spec),
                popack_container(spec),
                revive_container(spec),
                front_container(spec),
            ],
            "volumes": _volumes(owner, spec),
        },
    }


def template_hash(pod_template: dict[str, Any]) -> str:
    """A stable digest of the pod template as the operator builds it (key order ignored)."""
    canonical = json.dumps(pod_template, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def build(
    owner: ObjectRef,
    spec: ClusterSpec,
    *,
    replicas: int,
    config_hash: str,
    partition: int,
    replica: int = 0,
) -> dict[str, Any]:
    """The StatefulSet with ``replicas`` pods (planning decides it; see scaling).

    ``partition`` (planning.rollout decides it) gates rolling updates: the StatefulSet
    controller replaces only pods whose ordinal is >= it. The StatefulSet's own annotation
    ``popfleet.io/template-hash`` records which pod template this is, so the next round
    knows whether its apply changes the template.
    """
    pod_template = template(owner, spec, config_hash=config_hash, replica=replica)
    metadata = meta.object_meta(owner, names.replica_statefulset(owner.name, replica))
    metadata["annotations"] = {names.TEMPLATE_HASH: template_hash(pod_template)}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": metadata,
        "spec": {
            "replicas": replicas,
            "serviceName": names.headless_service(owner.name),
            "podManagementPolicy": "Parallel",
            "updateStrategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"partition": partition},
            },
            "selector": {"matchLabels": names.replica_selector_labels(owner.name, replica)},
            "persistentVolumeClaimRetentionPolicy": {
                "whenDeleted": "Retain",
                "whenScaled": "Retain",
            },
            "template": pod_template,
            "volumeClaimTemplates": [_claim(spec)],
        },
    }
