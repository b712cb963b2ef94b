"""Names, labels, annotations and ports shared by builders, planning and handlers.

Children of a BrokerCluster ``NAME`` (all in its namespace):

=====================  ==========================  ==========================================
kind                   name                        purpose
=====================  ==========================  ==========================================
StatefulSet            ``NAME``                    the broker pods ``NAME-0``, ``NAME-1``, ...
Service (headless)     ``NAME-brokers``            stable pod DNS; publishes not-ready pods
Service                ``NAME``                    client entry point (routes then name pods)
ConfigMap              ``NAME-config``             cluster settings mounted at /etc/popfleet
PodDisruptionBudget    ``NAME``                    at most one broker down voluntarily
ServiceAccount         ``NAME-broker``             the pods' identity (no API token mounted)
NetworkPolicy          ``NAME``                    client port open, admin port operator-only
=====================  ==========================  ==========================================

The operator dials brokers on pod IPs only (``status.podIP``), never on Service addresses.
"""

from __future__ import annotations

GROUP = "popfleet.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
FIELD_MANAGER = "popfleet-operator"

CLIENT_PORT = 8081
ADMIN_PORT = 9877
DATA_MOUNT = "/data"
CONFIG_MOUNT = "/etc/popfleet"
ADMIN_TOKEN_MOUNT = "/etc/popfleet-admin"  # noqa: S105 - a mount path, not a secret
CREDENTIALS_MOUNT = "/etc/popfleet-credentials"  # spec.auth.credentialsSecret, popack only
CREDENTIALS_KEY = "credentials.yaml"  # the Secret key holding the accounts file
TLS_MOUNT = "/etc/popfleet-tls"  # spec.tls.secretName (kubernetes.io/tls), front only
# /metrics of each container: the three roles and popfront
REPLICATION_PORT = 9878  # a replicated set's leader serves its followers here (spec.replication)
LEADER_PORT = 8082  # popfront serves clients here only while its pod leads its set
LEADER_FILE = "/data/leader"  # the store role keeps it fresh while it leads; popfront reads it
REPLICATION_TOKEN_MOUNT = "/etc/popfleet-replication"  # noqa: S105 - a mount path
METRICS_PORTS = {"store": 9100, "popack": 9101, "revive": 9102, "front": 9103}
STORE_SOCKET = f"{DATA_MOUNT}/store.sock"
STORE_DATA_DIR = f"{DATA_MOUNT}/store"  # the store role's files; popack reads them too
FRONT_SOCKET = f"{DATA_MOUNT}/popack.sock"  # popack's v2 endpoint, behind the front container
FRONT_COMMAND = "popfront"  # the compiled front end in the broker image (broker_image/front)
BROKER_UID = 10001

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_PART_OF = "app.kubernetes.io/part-of"
LABEL_CLUSTER = f"{GROUP}/cluster"
# Replicated sets (spec.replication): replica r >= 1 of every set runs in StatefulSet
# NAME-r<r>, its pods labelled with r; the leader of a set labels its own pod (the broker's
# --leader-label-selector); the StatefulSet controller labels each pod with its ordinal (1.28+).
LABEL_REPLICA_INDEX = f"{GROUP}/replica-index"
LABEL_LEADER = f"{GROUP}/leader"
LABEL_POD_INDEX = "apps.kubernetes.io/pod-index"
# What the stores write on a set's Lease (popbroker.replicator.leases; read for status).
TERM_ANNOTATION = f"{GROUP}/term"
IN_SYNC_ANNOTATION = f"{GROUP}/in-sync"  # comma-separated replica (pod) names
BROKER_APP = "popfleet-broker"
OPERATOR_APP = "popfleet-operator"
AUDIT_ROLE_LABEL = f"{GROUP}/role"

# Annotations a user sets on a BrokerCluster, Topic or ConsumerGroup (Strimzi-style).
PAUSED = f"{GROUP}/paused"  # "true": leave brokers and children alone, say so in status
MANAGED = f"{GROUP}/managed"  # "false": never touch the brokers for this object, even on delete
CONFIG_HASH = f"{GROUP}/config-hash"  # on the pod template: rolls the pods on a settings change
BROKERS = f"{GROUP}/brokers"  # set by the operator on Topics/ConsumerGroups: brokers changed
PODS = f"{GROUP}/pods"  # set by the operator on a BrokerCluster: its pods changed
LEASES = f"{GROUP}/leases"  # set by the operator: a set Lease changed leader, term or in-sync
# On the StatefulSet (not its template): a hash of the pod template the operator last applied,
# so a round can tell that its apply changes the template (a rollout starts) before the
# StatefulSet controller has computed the new revision.
TEMPLATE_HASH = f"{GROUP}/template-hash"
# Set by the StatefulSet controller on each pod: the controller revision the pod was made from.
LABEL_REVISION = "controller-revision-hash"


def statefulset(cluster: str) -> str:
    return cluster


def replica_statefulset(cluster: str, replica: int) -> str:
    """Replica 0 of every set is the StatefulSet ``NAME`` (its pods ``NAME-i``, as without
    replication); replica r >= 1 is ``NAME-r<r>``."""
    return cluster if replica == 0 else f"{cluster}-r{replica}"


def replica_of(cluster: str, pod_name: str) -> tuple[int, int] | None:
    """(replica, ordinal) of a broker pod of ``cluster``, None for a foreign name."""
    plain = ordinal(cluster, pod_name)
    if plain is not None:
        return 0, plain
    rest = pod_name.removeprefix(f"{cluster}-r")
    replica, _, number = rest.partition("-")
    if rest == pod_name or not replica.isdigit() or not number.isdigit() or int(replica) < 1:
        return None
    return int(replica), int(number)


def set_service(cluster: str, ordinal: int) -> str:
    """The Service clients reach set ``ordinal``'s leader through (its broker name)."""
    return pod(cluster, ordinal)


def replication_secret(cluster: str) -> str:
    return f"{cluster}-replication"


def headless_service(cluster: str) -> str:
    return f"{cluster}-brokers"


def client_service(cluster: str) -> str:
    return cluster


def configmap(cluster: str) -> str:
    return f"{cluster}-config"


def service_account(cluster: str) -> str:
    return f"{cluster}-broker"


def pod(cluster: str, ordinal: int) -> str:
    return f"{cluster}-{ordinal}"


def ordinal(cluster: str, pod_name: str) -> int | None:
    """The StatefulSet ordinal of ``pod_name`` in ``cluster``, None for a foreign name."""
    prefix = f"{cluster}-"
    rest = pod_name.removeprefix(prefix)
    if rest == pod_name or not rest.isdigit():
        return None
    return int(rest)


def selector_labels(cluster: str) -> dict[str, str]:
    """The StatefulSet's selector: stable for the object's life (nothing version-ish)."""
    return {LABEL_NAME: BROKER_APP, LABEL_INSTANCE: cluster, LABEL_CLUSTER: cluster}


def replica_selector_labels(cluster: str, replica: int) -> dict[str, str]:
    """StatefulSet ``NAME-r<r>``'s selector. ``NAME``'s (replica 0) cannot change (a
    StatefulSet's selector is immutable) and matches these pods too: each StatefulSet
    manages only the pods it owns, so the overlap is harmless (design note, 2026-11-29)."""
    labels = selector_labels(cluster)
    if replica > 0:
        labels[LABEL_REPLICA_INDEX] = str(replica)
    return labels


def labels(cluster: str, component: str = "broker") -> dict[str, str]:
    return {
        **selector_labels(cluster),
        LABEL_COMPONENT: component,
        LABEL_MANAGED_BY: OPERATOR_APP,
        LABEL_PART_OF: "popfleet",
    }


def pod_selector(cluster: str) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(selector_labels(cluster).items()))


# --- Audits (spec.audit): runs, their identity and the annotations that drive them ----------
#
# ServiceAccount, Role and RoleBinding ``NAME-audit`` (the audit pods' identity); each run is a
# Job or SparkApplication ``NAME-audit-<unix seconds of its scheduled time>``.

AUDIT_APP = "popfleet-audit"
AUDIT_RUN_NOW = f"{GROUP}/audit-run-now"  # any new value: a run now; on a run: the value
AUDIT_SCHEDULED_AT = f"{GROUP}/audit-scheduled-at"  # on a run: the time it was due
AUDIT_DATA_MOUNT = "/var/lib/popfleet-audit"  # output/ and history/ (the claim, or emptyDir)
AUDIT_MAIN_FILE = "/opt/popfleet-audit/main.py"  # popfleet_audit/main.py in the audit image
SPARK_UID = 185  # the audit image's user (the official Spark image's uid)
# Pod templates in the audit image (popfleet_audit/podtemplates): securityContext, /tmp; Spark
# reads them where it builds the pods (the driver for executors, spark-submit for the driver).
AUDIT_POD_TEMPLATES = "/opt/popfleet-audit/pod-templates"
SPARK_CONTAINER = "spark"  # the container's name in those templates


def audit_identity(cluster: str) -> str:
    """ServiceAccount, Role and RoleBinding of a cluster's audit pods."""
    return f"{cluster}-audit"


def audit_executor_identity(cluster: str) -> str:
    """ServiceAccount of a cluster's Spark executor pods: no role is bound to it, no token."""
    return f"{cluster}-audit-executor"


def audit_run(cluster: str, scheduled_s: int) -> str:
    return f"{cluster}-audit-{scheduled_s}"


def audit_labels(cluster: str) -> dict[str, str]:
    """Labels of audit runs and their pods (no broker selector label: not a broker pod)."""
    return {
        LABEL_NAME: AUDIT_APP,
        LABEL_INSTANCE: cluster,
        LABEL_COMPONENT: "audit",
        LABEL_MANAGED_BY: OPERATOR_APP,
        LABEL_PART_OF: "popfleet",
        AUDIT_ROLE_LABEL: "audit",  # the brokers' NetworkPolicy lets these reach the admin port
    }


def audit_selector(cluster: str) -> str:
    return f"{LABEL_NAME}={AUDIT_APP},{LABEL_INSTANCE}={cluster}"
