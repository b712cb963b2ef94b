"""Parsed specs: frozen values built from the raw (schema-defaulted) CR bodies.

The apiserver already enforced the CRD schema (types, enums, ranges, CEL rules), so parsing
mostly reads; it raises :class:`~popfleet_operator.errors.InvalidSpec` only for what a schema
cannot say (quantities that do not parse, reserved broker names). Defaults are repeated here
for objects created before a default existed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from popfleet_api import models
from popfleet_operator.errors import InvalidSpec

Raw = Mapping[str, Any]

QUANTITY = re.compile(r"^[+]?[0-9]+(\.[0-9]+)?(m|k|Ki|Mi|Gi|Ti|Pi|Ei|M|G|T|P|E)?$")
RESERVED_PREFIXES = ("rmq_sys_", "%RETRY%", "%DLQ%")
ROLES = ("store", "popack", "revive")
CONTAINERS = (*ROLES, "front")  # a broker pod's containers: the roles and popfront


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """Identity of a CR: for owner references, events and conflict ordering."""

    kind: str
    namespace: str
    name: str
    uid: str
    generation: int
    created: str  # creationTimestamp, RFC 3339 (sorts lexicographically)

    @classmethod
    def from_body(cls, kind: str, body: Raw) -> ObjectRef:
        meta = body["metadata"]
        return cls(
            kind=kind,
            namespace=str(meta.get("namespace", "")),
            name=str(meta["name"]),
            uid=str(meta.get("uid", "")),
            generation=int(meta.get("generation", 0)),
            created=str(meta.get("creationTimestamp", "")),
        )


@dataclass(frozen=True, slots=True)
class Resources:
    requests: Mapping[str, str] = field(default_factory=dict)
    limits: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PopTuning:
    ck_stay_buffer_time_ms: int = 10_000
    ck_max_buffer_size: int = 200_000
    long_polling_max_requests: int = 10_000


@dataclass(frozen=True, slots=True)
class LivenessProbe:
    """``spec.livenessProbe``: the timings of every broker container's liveness probe."""

    period_seconds: int = 10
    failure_threshold: int = 6
    timeout_seconds: int = 1

    def timings(self) -> dict[str, int]:
        """The probe's timing fields, as a container's ``livenessProbe`` spells them; the
        timeout only when it is not Kubernetes' default, so that pods of clusters that do not
        set it keep the template they had before the field existed (no rolling restart)."""
        fields = {"periodSeconds": self.period_seconds, "failureThreshold": self.failure_threshold}
        if self.timeout_seconds != 1:
            fields["timeoutSeconds"] = self.timeout_seconds
        return fields


@dataclass(frozen=True, slots=True)
class SecretKeyRef:
    name: str
    key: str


@dataclass(frozen=True, slots=True)
class ReplicationSpec:
    """``spec.replication`` (docs/design/2026-11-28-replication.md): pods per broker set,
    SYNC or ASYNC, and the in-sync replicas a SYNC write needs. ``replicas`` 1 is today's
    one pod per broker."""

    replicas: int = 1
    mode: str = "SYNC"
    min_in_sync_replicas: int = 1

    MAX_REPLICAS = 3  # the CRD's maximum for replicas

    @property
    def enabled(self) -> bool:
        return self.replicas > 1


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    brokers: int
    image: str
    image_pull_policy: str = "IfNotPresent"
    read_queue_nums: int = 8
    write_queue_nums: int = 8
    storage_size: str = "1Gi"
    storage_class: str | None = None
    flush_mode: models.FlushMode = models.FlushMode.ASYNC
    revive_queue_num: int = 8
    pop: PopTuning = field(default_factory=PopTuning)
    liveness: LivenessProbe = field(default_factory=LivenessProbe)
    resources: Mapping[str, Resources] = field(default_factory=dict)
    admin_token: SecretKeyRef | None = None
    credentials_secret: str | None = None
    tls_secret: str | None = None
    replication: ReplicationSpec = field(default_factory=ReplicationSpec)


@dataclass(frozen=True, slots=True)
class TopicSpec:
    cluster: str
    topic_name: str
    queues: int = 8
    perm: models.Permission = models.Permission.READ_WRITE
    message_type: models.MessageType = models.MessageType.NORMAL
    delete_on_broker: bool = False

    def admin_topic(self) -> models.Topic:
        return models.Topic(
            self.topic_name,
            read_queue_nums=self.queues,
            write_queue_nums=self.queues,
            perm=self.perm,
            message_type=self.message_type,
        )


@dataclass(frozen=True, slots=True)
class Subscription:
    topic: str
    filter_expression: str = "*"
    filter_type: str = "TAG"


@dataclass(frozen=True, slots=True)
class GroupSpec:
    cluster: str
    group_name: str
    subscriptions: tuple[Subscription, ...]
    consume_mode: models.ConsumeMode = models.ConsumeMode.PULL
    pop_share_queue_num: int = 0
    max_reconsume_times: int = 16
    retry_policy: models.RetryPolicy = field(default_factory=models.RetryPolicy)
    fifo: bool = False
    delete_on_broker: bool = False

    @property
    def topics(self) -> tuple[str, ...]:
        return tuple(s.topic for s in self.subscriptions)

    def admin_group(self) -> models.Group:
        return models.Group(
            self.group_name,
            max_reconsume_times=self.max_reconsume_times,
            retry_policy=self.retry_policy,
            fifo=self.fifo,
        )


def _quantity(value: object, *, where: str) -> str:
    text = str(value)
    if not QUANTITY.fullmatch(text):
        raise InvalidSpec(f"{where}: {text!r} is not a Kubernetes quantity (e.g. 500m, 1Gi)")
    return text


def _resources(raw: Raw, role: str) -> Resources:
    where = f"spec.resources.{role}"
    return Resources(
        requests={
            k: _quantity(v, where=f"{where}.requests.{k}")
            for k, v in (raw.get("requests") or {}).items()
        },
        limits={
            k: _quantity(v, where=f"{where}.limits.{k}")
            for k, v in (raw.get("limits") or {}).items()
        },
    )


def _broker_name(name: str, *, where: str) -> str:
    if name.startswith(RESERVED_PREFIXES):
        raise InvalidSpec(f"{where}: {name!r} uses a prefix the brokers reserve for system topics")
    return name


def parse_cluster(spec: Raw) -> ClusterSpec:
    queues = spec.get("queueDefaults") or {}
    storage = spec.get("storage") or {}
    pop = spec.get("pop") or {}
    liveness = spec.get("livenessProbe") or {}
    auth = spec.get("auth") or {}
    token = auth.get("adminTokenSecret")
    raw_resources = spec.get("resources") or {}
    return ClusterSpec(
        brokers=int(spec.get("brokers", 3)),
        image=str(spec.get("image", "ghcr.io/popfleet/broker:0.1.0")),
        image_pull_policy=str(spec.get("imagePullPolicy", "IfNotPresent")),
        read_queue_nums=int(queues.get("readQueueNums", 8)),
        write_queue_nums=int(queues.get("writeQueueNums", 8)),
        storage_size=_quantity(storage.get("size", "1Gi"), where="spec.storage.size"),
        storage_class=storage.get("storageClassName") or None,
        flush_mode=models.FlushMode(spec.get("flushMode", "ASYNC")),
        revive_queue_num=int(spec.get("reviveQueueNum", 8)),
        pop=PopTuning(
            ck_stay_buffer_time_ms=int(pop.get("ckStayBufferTimeMs", 10_000)),
            ck_max_buffer_size=int(pop.get("ckMaxBufferSize", 200_000)),
            long_polling_max_requests=int(pop.get("longPollingMaxRequests", 10_000)),
        ),
        liveness=LivenessProbe(
            period_seconds=int(liveness.get("periodSeconds", 10)),
            failure_threshold=int(liveness.get("failureThreshold", 6)),
            timeout_seconds=int(liveness.get("timeoutSeconds", 1)),
        ),
        resources={
            name: _resources(raw_resources[name], name)
            for name in CONTAINERS
            if name in raw_resources
        },
        admin_token=SecretKeyRef(str(token["name"]), str(token.get("key", "token")))
        if token
        else None,
        credentials_secret=(auth.get("credentialsSecret") or {}).get("name"),
        tls_secret=(spec.get("tls") or {}).get("secretName"),
        replication=_replication(spec.get("replication") or {}),
    )


def _replication(raw: Raw) -> ReplicationSpec:
    replication = ReplicationSpec(
        replicas=int(raw.get("replicas", 1)),
        mode=str(raw.get("mode", "SYNC")),
        min_in_sync_replicas=int(raw.get("minInSyncReplicas", 1)),
    )
    if not 1 <= replication.min_in_sync_replicas <= replication.replicas:
        raise InvalidSpec(
            f"spec.replication: minInSyncReplicas {replication.min_in_sync_replicas} must be "
            f"between 1 and replicas {replication.replicas}"
        )
    return replication


def parse_topic(name: str, spec: Raw) -> TopicSpec:
    return TopicSpec(
        cluster=str(spec["clusterRef"]["name"]),
        topic_name=_broker_name(str(spec.get("topicName") or name), where="spec.topicName"),
        queues=int(spec.get("queues", 8)),
        perm=models.Permission(spec.get("perm", "READ_WRITE")),
        message_type=models.MessageType(spec.get("messageType", "NORMAL")),
        delete_on_broker=spec.get("deletionPolicy", "Retain") == "Delete",
    )


def _retry_policy(raw: Raw) -> models.RetryPolicy:
    return models.RetryPolicy(
        kind=models.RetryKind(raw.get("type", "EXPONENTIAL")),
        initial_backoff_ms=int(raw.get("initialBackoffMs", 1_000)),
        max_backoff_ms=int(raw.get("maxBackoffMs", 60_000)),
        multiplier=float(raw.get("multiplier", 2.0)),
        customized_backoff_ms=tuple(int(v) for v in raw.get("customizedBackoffMs") or ()),
    )


def parse_group(name: str, spec: Raw) -> GroupSpec:
    subscriptions = tuple(
        Subscription(
            topic=_broker_name(str(t["name"]), where="spec.topics[].name"),
            filter_expression=str(t.get("filterExpression", "*")),
            filter_type=str(t.get("filterType", "TAG")),
        )
        for t in spec.get("topics") or ()
    )
    if not subscriptions:
        raise InvalidSpec("spec.topics: a group subscribes to at least one topic")
    return GroupSpec(
        cluster=str(spec["clusterRef"]["name"]),
        group_name=_broker_name(str(spec.get("groupName") or name), where="spec.groupName"),
        subscriptions=subscriptions,
        consume_mode=models.ConsumeMode(spec.get("consumeMode", "PULL")),
        pop_share_queue_num=int(spec.get("popShareQueueNum", 0)),
        max_reconsume_times=int(spec.get("maxReconsumeTimes", 16)),
        retry_policy=_retry_policy(spec.get("retryPolicy") or {}),
        fifo=bool(spec.get("fifo", False)),
        delete_on_broker=spec.get("deletionPolicy", "Retain") == "Delete",
    )


# --- Audits (BrokerCluster spec.audit) -------------------------------------------------------

SPARK_MEMORY = re.compile(r"^[0-9]+[kmgtp]?b?$", re.IGNORECASE)
SPARK_MASTER = re.compile(r"^(local(\[(\*|[1-9][0-9]*)(,[0-9]+)?\])?|(k8s|spark)://\S+)$")
AUDIT_BACKENDS = ("auto", "sparkapplication", "job")


@dataclass(frozen=True, slots=True)
class SparkSettings:
    driver_cores: int = 1
    driver_memory: str = "512m"  # Spark's units (k, m, g, t), not Kubernetes quantities
    executor_instances: int = 1
    executor_cores: int = 1
    executor_memory: str = "512m"
    conf: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AuditHistory:
    successful_runs_limit: int = 3
    failed_runs_limit: int = 3
    claim_name: str | None = None


@dataclass(frozen=True, slots=True)
class AuditSpec:
    """``spec.audit``: when and how the operator runs the Spark audits of a cluster.

    ``backend`` is ``auto`` (a SparkApplication when the kubeflow CRD is installed, else a
    Job), ``sparkapplication`` or ``job``; ``master`` only matters for the Job backend.
    The cron ``schedule`` is checked by ``planning.auditschedule`` (the cron library's layer).
    """

    enabled: bool = False
    schedule: str = "*/15 * * * *"
    image: str = "ghcr.io/popfleet/audit:0.1.0"
    backend: str = "auto"
    master: str = "local[*]"
    spark: SparkSettings = field(default_factory=SparkSettings)
    history: AuditHistory = field(default_factory=AuditHistory)

    @property
    def kubernetes_master(self) -> bool:
        return self.master.startswith("k8s://")


def _spark_memory(value: object, *, where: str) -> str:
    text = str(value)
    if not SPARK_MEMORY.fullmatch(text):
        raise InvalidSpec(f"{where}: {text!r} is not a Spark memory size (e.g. 512m, 2g)")
    return text


def _spark_settings(raw: Raw) -> SparkSettings:
    conf = raw.get("conf") or {}
    for key in conf:
        if not str(key).startswith("spark."):
            raise InvalidSpec(f"spec.audit.spark.conf: {key!r} is not a spark.* setting")
    return SparkSettings(
        driver_cores=int(raw.get("driverCores", 1)),
        driver_memory=_spark_memory(
            raw.get("driverMemory", "512m"), where="spec.audit.spark.driverMemory"
        ),
        executor_instances=int(raw.get("executorInstances", 1)),
        executor_cores=int(raw.get("executorCores", 1)),
        executor_memory=_spark_memory(
            raw.get("executorMemory", "512m"), where="spec.audit.spark.executorMemory"
        ),
        conf={str(k): str(v) for k, v in sorted(conf.items())},
    )


def parse_audit(spec: Raw) -> AuditSpec:
    """``spec.audit`` of a BrokerCluster body's ``spec`` (absent: audits disabled)."""
    raw = spec.get("audit") or {}
    history = raw.get("history") or {}
    backend = str(raw.get("backend", "auto"))
    if backend not in AUDIT_BACKENDS:
        raise InvalidSpec(f"spec.audit.backend: {backend!r} is not one of {AUDIT_BACKENDS}")
    master = str(raw.get("master", "local[*]"))
    if not SPARK_MASTER.fullmatch(master):
        raise InvalidSpec(
            f"spec.audit.master: {master!r} is not local, local[N], local[*], k8s://... "
            "or spark://..."
        )
    return AuditSpec(
        enabled=bool(raw.get("enabled", False)),
        schedule=str(raw.get("schedule", "*/15 * * * *")),
        image=str(raw.get("image", "ghcr.io/popfleet/audit:0.1.0")),
        backend=backend,
        master=master,
        spark=_spark_settings(raw.get("spark") or {}),
        history=AuditHistory(
            successful_runs_limit=int(history.get("successfulRunsLimit", 3)),
            failed_runs_limit=int(history.get("failedRunsLimit", 3)),
            claim_name=history.get("claimName") or None,
        ),
    )
