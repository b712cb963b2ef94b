"""Observability on a real cluster (issue 19): a real Prometheus scrapes the chart's PodMonitors.

The kind story runs these steps under its own traffic:

1. ``installed`` (before the chart): prometheus-operator and Prometheus, both built here from
   the Go module proxy (``make prometheus-operator-bin prometheus-bin``), in namespace
   ``popfleet-monitoring``. The operator's ``bundle.yaml`` (its CRDs, RBAC, Deployment) is
   applied as its module ships it, moved to that namespace and with pull policy ``Never``; a
   ``Prometheus`` selects every PodMonitor and PrometheusRule of the cluster, scrapes and
   evaluates every 5 s. The chart is then installed with its PodMonitors and PrometheusRule
   on (``e2e/kind/values/kind.yaml``: a 30 s lag window, a 15 s hold).
2. ``lag_alert_fires`` (after the hung consumer stalls its PULL queues): every broker role of
   every pod and the operator are scraped (``up`` = 1), and ``PopfleetConsumerLagGrowing``
   fires for the story's group.
3. ``lag_alert_resolves`` (after the switch to POP drained the backlog): it resolves.
4. ``every_query_returns_series`` (while the replicated set runs): every dashboard panel's
   query, with the variables Grafana fills in, every selector of every rule and the KEDA
   example's query return series from the real scrape — the operator's and the replicated
   set's too, which the loopback test (``tests/integration/monitoring``) cannot see.

The host reaches Prometheus as it reaches brokers: through the proxy pod (HTTP CONNECT to the
Prometheus pod's address, which ``access.resolve`` checks is in the pod network).
"""

from __future__ import annotations

import http.client
import json
import re
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from rocketmq import FilterExpression, SimpleConsumer
from rocketmq.v5.exception import BadRequestException

from popfleet_e2e import brokers, replicated, steps, traffic, waits
from popfleet_e2e.access import REPO, ClusterAccess, Obj, ScenarioError
from popfleet_e2e.steps import Story

NAMESPACE = "popfleet-monitoring"
PROMETHEUS = "popfleet"  # the Prometheus object; its pod is prometheus-popfleet-0
POD = f"prometheus-{PROMETHEUS}-0"
PROMETHEUS_ACCOUNT = f"{PROMETHEUS}-prometheus"  # its service account and ClusterRole
PORT = 9090
DASHBOARDS = REPO / "charts" / "popfleet" / "dashboards"
KEDA_EXAMPLE = REPO / "crds" / "examples" / "keda" / "pop-consumers.yaml"
LAG_ALERT = "PopfleetConsumerLagGrowing"
SELECTOR = re.compile(r"(?<![\w:])(popfleet[a-z0-9_:]*|up)(\{[^}]*\})?(?![\w:(])")
ROLES = ("store", "popack", "revive", "front")
STALE_INVISIBLE_S = 30  # the message a stale ack leaves invisible, then redelivered


def selectors(expr: str) -> list[str]:
    """The vector selectors of ``expr``, with their label matchers (``up{job="…"}``,
    ``popfleet:consumer_lag_messages:sum``), each once."""
    return sorted({m.group(0) for m in SELECTOR.finditer(expr)})


def dashboard_queries(
    variables: Mapping[str, str], *, dashboards: Path = DASHBOARDS
) -> list[tuple[str, str, str]]:
    """(dashboard, panel, query with ``variables`` filled in) of every panel of every dashboard."""
    found = []
    for path in sorted(dashboards.glob("*.json")):
        board = json.loads(path.read_text())
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                expr = target["expr"]
                for name, value in variables.items():
                    expr = expr.replace(name, value)
                found.append((path.stem, panel["title"], expr))
    return found


def rule_selectors(groups: Sequence[Obj]) -> dict[str, str]:
    """Every selector of every rule -> the (first) rule that reads it."""
    found: dict[str, str] = {}
    for group in groups:
        for rule in group["rules"]:
            name = rule.get("alert") or rule["record"]
            for selector in selectors(rule["expr"]):
                found.setdefault(selector, name)
    return found


def keda_queries(example: Path = KEDA_EXAMPLE) -> list[str]:
    """The Prometheus queries of the KEDA example's ScaledObjects."""
    docs = [d for d in yaml.safe_load_all(example.read_text()) if d]
    return [
        t["metadata"]["query"]
        for d in docs
        if d["kind"] == "ScaledObject"
        for t in d["spec"]["triggers"]
        if t["type"] == "prometheus"
    ]


class _ManifestLoader(yaml.SafeLoader):
    """YAML 1.1 reads a bare ``=`` as the "value" tag, which SafeLoader cannot build; the CRDs
    of prometheus-operator have one as an enum value (an operator): it is the string "="."""


def _value(loader: yaml.SafeLoader, node: yaml.Node) -> str:
    if not isinstance(node, yaml.ScalarNode):
        raise ScenarioError(f"a YAML value tag on a {type(node).__name__}, not a scalar")
    return str(loader.construct_scalar(node))


_ManifestLoader.add_constructor("tag:yaml.org,2002:value", _value)


def manifests(text: str) -> list[Obj]:
    """The objects of a multi-document manifest, ``=`` read as a string."""
    return [doc for doc in yaml.load_all(text, Loader=_ManifestLoader) if doc]


def operator_objects(bundle: str, *, namespace: str = NAMESPACE) -> tuple[list[Obj], list[Obj]]:
    """prometheus-operator's bundle as (CRDs, everything else): moved from ``default`` to
    ``namespace`` (its binding's subject too) and its images never pulled."""
    crds, rest = [], []
    for doc in manifests(bundle):
        if doc["kind"] == "CustomResourceDefinition":
            crds.append(doc)
            continue
        if doc["metadata"].get("namespace") == "default":
            doc["metadata"]["namespace"] = namespace
        for subject in doc.get("subjects") or []:
            if subject.get("namespace") == "default":
                subject["namespace"] = namespace
        if doc["kind"] == "Deployment":
            for container in doc["spec"]["template"]["spec"]["containers"]:
                container["imagePullPolicy"] = "Never"
        rest.append(doc)
    if not crds or not any(d["kind"] == "Deployment" for d in rest):
        raise ScenarioError("prometheus-operator's bundle has no CRDs or no Deployment")
    return crds, rest


def prometheus_rbac(namespace: str = NAMESPACE) -> list[Obj]:
    """Prometheus's service account and what it may read (pods and their endpoints)."""
    meta = {"name": PROMETHEUS_ACCOUNT, "namespace": namespace}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": PROMETHEUS_ACCOUNT},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["nodes", "services", "endpoints", "pods"],
                    "verbs": ["get", "list", "watch"],
                },
                {
                    "apiGroups": ["discovery.k8s.io"],
                    "resources": ["endpointslices"],
                    "verbs": ["get", "list", "watch"],
                },
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},
                {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": PROMETHEUS_ACCOUNT},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": PROMETHEUS_ACCOUNT,
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": PROMETHEUS_ACCOUNT, "namespace": namespace}
            ],
        },
    ]


def prometheus_objects(*, image: str, version: str, namespace: str = NAMESPACE) -> list[Obj]:
    """The Prometheus (every PodMonitor and PrometheusRule of the cluster, 5 s scrape and
    evaluation) and what it may read."""
    every: Obj = {}
    return [
        *prometheus_rbac(namespace),
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "Prometheus",
            "metadata": {"name": PROMETHEUS, "namespace": namespace},
            "spec": {
                "image": image,
                "version": version,
                "imagePullPolicy": "Never",
                "replicas": 1,
                "serviceAccountName": PROMETHEUS_ACCOUNT,
                "scrapeInterval": "5s",
                "evaluationInterval": "5s",
                "podMonitorSelector": every,
                "podMonitorNamespaceSelector": every,
                "serviceMonitorSelector": every,
                "serviceMonitorNamespaceSelector": every,
                "ruleSelector": every,
                "ruleNamespaceSelector": every,
                "resources": {
                    "requests": {"cpu": "50m", "memory": "200Mi"},
                    "limits": {"memory": "1Gi"},
                },
                "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "fsGroup": 65534},
            },
        },
    ]


class PrometheusApi:
    """Prometheus's HTTP API: at ``access.prometheus_url`` where the host reaches it directly
    (the testbed: a host process on loopback), else through the proxy pod (kind: HTTP CONNECT
    to the Prometheus pod's IP)."""

    def __init__(self, access: ClusterAccess) -> None:
        self.access = access
        self.direct: tuple[str, int] | None = None
        if access.prometheus_url is not None:
            url = urllib.parse.urlsplit(access.prometheus_url)
            host, _, port = access.resolve(f"{url.hostname}:{url.port}").rpartition(":")
            self.direct = (host, int(port))
        elif access.grpc_proxy is None:
            raise ScenarioError("no proxy: the host reaches Prometheus only through the proxy pod")
        proxy = urllib.parse.urlsplit(access.grpc_proxy or "")
        self.proxy = (proxy.hostname or "", proxy.port or 0)

    def _target(self) -> tuple[str, int]:
        pod = self.access.get("pod", POD, namespace=NAMESPACE)
        ip = (pod.get("status") or {}).get("podIP")
        if not ip:
            raise ScenarioError(f"{POD} has no pod IP yet")
        host, _, port = self.access.resolve(f"{ip}:{PORT}").rpartition(":")
        return host, int(port)

    def get(self, path: str, **params: str) -> Any:
        if self.direct is not None:
            connection = http.client.HTTPConnection(*self.direct, timeout=15)
        else:
            connection = http.client.HTTPConnection(*self.proxy, timeout=15)
            connection.set_tunnel(*self._target())
        try:
            query = f"?{urllib.parse.urlencode(params)}" if params else ""
            connection.request("GET", f"/api/v1/{path}{query}")
            reply = connection.getresponse()
            body = reply.read()
        finally:
            connection.close()
        if reply.status != 200:
            raise ScenarioError(f"Prometheus {path} {params}: HTTP {reply.status}: {body[:300]!r}")
        answer = json.loads(body)
        if answer.get("status") != "success":
            raise ScenarioError(f"Prometheus {path} {params}: {answer}")
        return answer["data"]

    def query(self, expr: str) -> list[Obj]:
        return list(self.get("query", query=expr)["result"])

    def firing(self, alert: str, **labels: str) -> list[Obj]:
        return [
            a
            for a in self.get("alerts")["alerts"]
            if a["labels"].get("alertname") == alert
            and a["state"] == "firing"
            and all(a["labels"].get(k) == v for k, v in labels.items())
        ]

    def targets_up(self) -> dict[tuple[str, str, str], float]:
        """(job, pod, role) -> ``up`` of every active target."""
        return {
            (s["metric"].get("job", ""), s["metric"].get("pod", ""), s["metric"].get("role", "")):
                float(s["value"][1])
            for s in self.query("up")
        }  # fmt: skip


def as_list(objects: Sequence[Obj]) -> Obj:
    return {"apiVersion": "v1", "kind": "List", "items": list(objects)}


def apply_with_crds(access: ClusterAccess, crds: Sequence[Obj], rest: Sequence[Obj]) -> None:
    """An upstream install: its CRDs server-side (they exceed client-side apply's annotation
    limit) and Established, then everything else."""
    access.kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps(as_list(crds)),
                   timeout_s=120)  # fmt: skip
    for crd in crds:
        access.kubectl(
            "wait", "--for=condition=Established", f"crd/{crd['metadata']['name']}",
            "--timeout=60s", timeout_s=70,
        )  # fmt: skip
    access.kubectl("apply", "-f", "-", stdin=json.dumps(as_list(rest)))


def installed(story: Story) -> str:
    """Step 1 of the module docstring."""
    access = story.access
    build = access.monitoring
    if build is None:
        raise ScenarioError("this cluster has no monitoring build (make prometheus-operator-bin)")
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    access.kubectl("apply", "-f", "-", stdin=json.dumps(namespace))
    apply_with_crds(access, *operator_objects(build.bundle.read_text()))
    access.kubectl(
        "rollout", "status", "deployment/prometheus-operator", "-n", NAMESPACE, "--timeout=120s",
        timeout_s=130,
    )  # fmt: skip
    objects = prometheus_objects(image=build.prometheus_image, version=build.prometheus_version)
    access.kubectl("apply", "-f", "-", stdin=json.dumps(as_list(objects)))
    waits.until(
        lambda: access.get_or_none("pod", POD, namespace=NAMESPACE), timeout_s=120,
        what=f"prometheus-operator to create {POD}",
    )  # fmt: skip
    access.kubectl(
        "wait", "--for=condition=Ready", f"pod/{POD}", "-n", NAMESPACE, "--timeout=180s",
        timeout_s=190,
    )  # fmt: skip
    api = PrometheusApi(access)
    built = api.get("status/buildinfo")
    return f"prometheus-operator and Prometheus {built['version']} running in {NAMESPACE}"


def _jobs(access: ClusterAccess) -> tuple[str, str]:
    """The job labels prometheus-operator gives the chart's PodMonitors' targets."""
    release = f"{access.release_namespace}/{access.release}"
    return f"{release}-brokers", f"{release}-operator"


def _scraped(api: PrometheusApi, access: ClusterAccess) -> str | None:
    """None until every role of every story broker pod and the operator are up."""
    brokers_job, operator_job = _jobs(access)
    up = api.targets_up()
    pods = [f"{steps.CLUSTER}-{i}" for i in range(steps.REPLICAS)]
    wanted = [(brokers_job, pod, role) for pod in pods for role in ROLES]
    down = [t for t in wanted if up.get(t) != 1.0]
    operator = [v for (job, _, _), v in up.items() if job == operator_job]
    if down or operator != [1.0]:
        return None
    return f"{len(wanted)} broker targets and the operator up"


def lag_alert_fires(story: Story) -> str:
    """Step 2 of the module docstring; the seconds from this step's start to firing."""
    access = story.access
    api = PrometheusApi(access)
    began = time.monotonic()
    scraped = waits.until(
        lambda: _scraped(api, access), timeout_s=90, what="every broker role and the operator up",
        seen=lambda: str(sorted(api.targets_up().items())),
    )  # fmt: skip
    labels = {"namespace": access.namespace, "cluster": steps.CLUSTER, "group": steps.GROUP}
    waits.until(
        lambda: api.firing(LAG_ALERT, **labels), timeout_s=150, interval_s=1.0,
        what=f"{LAG_ALERT} firing for {labels}",
        seen=lambda: f"lag {api.query('popfleet:consumer_lag_messages:sum')}",
    )  # fmt: skip
    since = time.monotonic() - story.marks.get("traffic", began)
    return f"{scraped}; {LAG_ALERT} firing {since:.1f}s after the traffic (the hang) began"


def lag_alert_resolves(story: Story) -> str:
    """Step 3 of the module docstring; the seconds from this step's start to resolved."""
    access = story.access
    api = PrometheusApi(access)
    began = time.monotonic()
    labels = {"namespace": access.namespace, "cluster": steps.CLUSTER, "group": steps.GROUP}
    waits.until(
        lambda: not api.firing(LAG_ALERT, **labels), timeout_s=120, interval_s=1.0,
        what=f"{LAG_ALERT} resolved for {labels}",
        seen=lambda: f"lag {api.query('popfleet:consumer_lag_messages:sum')}",
    )  # fmt: skip
    since = time.monotonic() - story.marks.get("pop", began)
    return f"{LAG_ALERT} resolved {since:.1f}s after the patch to POP"


def _rules(access: ClusterAccess) -> list[Obj]:
    rules = access.items("prometheusrules", namespace=access.release_namespace)
    return [group for rule in rules for group in rule["spec"]["groups"]]


def every_query_returns_series(story: Story) -> str:
    """Step 4 of the module docstring; a replicated set's queries are asked of its leader."""
    access = story.access
    api = PrometheusApi(access)
    story_vars = {
        "$__rate_interval": "30s",
        "$namespace": access.namespace,
        "$cluster": steps.CLUSTER,
        "$pod": f"{steps.CLUSTER}-0",
        "$group": steps.GROUP,
    }
    leader = replicated.leader(access)
    if leader is None:
        raise ScenarioError(f"the replicated set {replicated.SET} has no leader")
    replicated_vars = {**story_vars, "$cluster": replicated.CLUSTER, "$pod": leader}
    refused = refuse_a_stale_ack(story)
    queries = [
        (f"{board}: {panel}", q)
        for board, panel, q in dashboard_queries(story_vars)
        if "popfleet_replication_" not in q
    ]
    queries += [
        (f"{board}: {panel}", q)
        for board, panel, q in dashboard_queries(replicated_vars)
        if "popfleet_replication_" in q
    ]
    queries += [(f"rule {rule}", s) for s, rule in rule_selectors(_rules(access)).items()]
    queries += [("KEDA example", q.replace('"shop"', f'"{access.namespace}"'))
                for q in keda_queries()]  # fmt: skip
    empty: list[tuple[str, str]] = []

    def answered() -> bool:
        empty[:] = [(where, q) for where, q in queries if not api.query(q)]
        return not empty

    waits.until(
        answered, timeout_s=120, interval_s=5.0, what="series for every query",
        seen=lambda: f"{len(empty)} still empty: {empty}",
    )  # fmt: skip
    return f"{len(queries)} queries (dashboards, rules, KEDA) all return series; {refused}"


def refuse_a_stale_ack(story: Story) -> str:
    """One ack the broker refuses, as a client with a stale receipt handle sends it (what the
    fleet dashboard's refused-entries panel counts): a ``SimpleConsumer`` of the story's
    group receives a message, extends its invisible time (a new handle) and acks with the old
    one. The message stays invisible for ``STALE_INVISIBLE_S`` and then goes back to the
    group's healthy consumers (the no-loss check sees it consumed)."""
    access = story.access
    endpoints = brokers.bootstrap(access, brokers.current(access, steps.CLUSTER),
                                  cluster=steps.CLUSTER)  # fmt: skip
    consumer = SimpleConsumer(
        traffic.configuration(endpoints), steps.GROUP, {steps.TOPIC: FilterExpression()},
        await_duration=3,
    )  # fmt: skip
    consumer.startup()
    try:
        got = waits.until(
            lambda: consumer.receive(1, STALE_INVISIBLE_S) or None, timeout_s=60,
            what=f"a message of {steps.GROUP} for a SimpleConsumer",
        )  # fmt: skip
        message = got[0]
        stale = message.receipt_handle
        consumer.change_invisible_duration(message, STALE_INVISIBLE_S)
        message._Message__receipt_handle = stale  # what a client that missed the change sends
        try:
            consumer.ack(message)
        except BadRequestException as exc:
            return f"a stale handle's ack refused ({exc})"
        raise ScenarioError("the broker acknowledged an ack with a stale receipt handle")
    finally:
        consumer.shutdown()
