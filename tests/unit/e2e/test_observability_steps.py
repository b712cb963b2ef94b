"""The kind observability and KEDA steps' own logic, without a cluster (issue 19).

What they do to upstream manifests (prometheus-operator's bundle, KEDA's kustomize output),
the objects they derive from the shipped KEDA example, and how the sampler turns pod counts
into consumed-per-second samples. The steps themselves run on kind (``make e2e-kind``,
``make e2e-keda``).
"""

from __future__ import annotations

import pytest
import yaml

from popfleet_e2e import elastic, observe
from popfleet_e2e.access import ScenarioError

BUNDLE = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: podmonitors.monitoring.coreos.com}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: prometheus-operator}
subjects: [{kind: ServiceAccount, name: prometheus-operator, namespace: default}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: prometheus-operator, namespace: default}
spec:
  template:
    spec:
      containers:
        - name: prometheus-operator
          image: quay.io/prometheus-operator/prometheus-operator:v0.85.0
"""


def test_the_operator_bundle_moves_to_our_namespace_and_never_pulls() -> None:
    crds, rest = observe.operator_objects(BUNDLE, namespace="mon")
    assert [c["metadata"]["name"] for c in crds] == ["podmonitors.monitoring.coreos.com"]
    binding, deployment = rest
    assert binding["subjects"][0]["namespace"] == "mon"
    assert deployment["metadata"]["namespace"] == "mon"
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["imagePullPolicy"] == "Never"
    assert container["image"].endswith(":v0.85.0")  # the name our image is built under


def test_a_bundle_without_a_deployment_is_refused() -> None:
    with pytest.raises(ScenarioError, match="no CRDs or no Deployment"):
        observe.operator_objects(BUNDLE.split("---", maxsplit=1)[0])


def test_prometheus_selects_everything_and_runs_our_image() -> None:
    objects = observe.prometheus_objects(
        image="popfleet.local/prometheus:v3.16.0", version="v3.16.0"
    )
    (prometheus,) = [o for o in objects if o["kind"] == "Prometheus"]
    spec = prometheus["spec"]
    for selector in ("podMonitorSelector", "podMonitorNamespaceSelector", "ruleSelector",
                     "ruleNamespaceSelector"):  # fmt: skip
        assert spec[selector] == {}, selector  # {} selects all; absent selects none
    assert (spec["image"], spec["version"], spec["imagePullPolicy"]) == (
        "popfleet.local/prometheus:v3.16.0", "v3.16.0", "Never",
    )  # fmt: skip
    (binding,) = [o for o in objects if o["kind"] == "ClusterRoleBinding"]
    assert binding["subjects"][0]["name"] == spec["serviceAccountName"]


def test_selectors_are_read_with_their_matchers() -> None:
    expr = 'sum(rate(popfleet_broker_messages_total{op="pop"}[1m])) / up{job="x"} > 0'
    assert observe.selectors(expr) == ['popfleet_broker_messages_total{op="pop"}', 'up{job="x"}']


KEDA = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: scaledobjects.keda.sh}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: keda-operator, namespace: keda}
spec:
  template:
    spec:
      containers: [{name: keda-operator, image: ghcr.io/kedacore/keda:main, args: [--leader-elect]}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: keda-metrics-apiserver, namespace: keda}
spec:
  template:
    spec:
      containers:
        - name: keda-metrics-apiserver
          image: ghcr.io/kedacore/keda-metrics-apiserver:main
"""


def test_keda_runs_our_images_without_webhook_patching() -> None:
    crds, rest = elastic.keda_objects(KEDA, operator_image="op:1", adapter_image="ad:1")
    assert len(crds) == 1
    containers = {d["metadata"]["name"]: d["spec"]["template"]["spec"]["containers"][0]
                  for d in rest}  # fmt: skip
    assert containers["keda-operator"]["image"] == "op:1"
    assert containers["keda-metrics-apiserver"]["image"] == "ad:1"
    assert all(c["imagePullPolicy"] == "Never" for c in containers.values())
    assert containers["keda-operator"]["args"] == [
        "--leader-elect",
        "--enable-webhook-patching=false",
    ]


def test_keda_manifests_with_the_webhooks_deployment_are_refused() -> None:
    webhooks = KEDA.replace(
        "name: keda-metrics-apiserver, namespace",
        "name: keda-admission-webhooks, namespace",
    )
    with pytest.raises(ScenarioError, match="unknown Deployment keda-admission-webhooks"):
        elastic.keda_objects(webhooks, operator_image="op:1", adapter_image="ad:1")


def test_the_consumers_are_the_shipped_example_renamed_to_the_step() -> None:
    config_map, deployment, scaled = elastic.consumer_objects(
        endpoints="elastic.story.svc:8081", broker_image="broker:1",
        prometheus="http://p:9090", query=elastic.group_query(elastic.LAG, "story"),
    )  # fmt: skip
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "prometheus"  # the example's trigger, kept
    assert trigger["metadata"]["ignoreNullValues"] == "false"
    assert trigger["metadata"]["serverAddress"] == "http://p:9090"
    assert 'cluster="elastic", group="workers", topic="jobs"' in trigger["metadata"]["query"]
    assert 'namespace="story"' in trigger["metadata"]["query"]
    assert scaled["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert (scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]) == (2, 8)
    pod = deployment["spec"]["template"]
    assert (
        deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    )
    (container,) = pod["spec"]["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True  # the example's
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["ENDPOINTS"] == "elastic.story.svc:8081" and env["HOME"] == "/tmp"
    assert "slow_consumer.py" in config_map["data"]
    yaml.safe_dump_all([config_map, deployment, scaled])  # serialisable as applied


def test_the_sampler_counts_what_every_pod_consumed_over_an_interval() -> None:
    sampler = elastic.Sampler(access=None)  # type: ignore[arg-type]
    before = {"a": (100, 10.0), "b": (50, 10.0), "c": (7, 10.0)}
    after = {"a": (150, 15.0), "b": (100, 15.0), "c": (7, 15.0)}
    sampler._sample(before, after, replicas=3)
    assert sampler.samples == [elastic.Sample("PULL", 3, 20.0, 2)]  # 100 in 5 s; c idle
    sampler._sample(before, {"a": (150, 15.0)}, replicas=3)  # a pod went: no sample
    assert len(sampler.samples) == 1
    assert sampler.curve("PULL") == {3: (20.0, 2)}


def test_an_enum_value_of_a_bare_equals_sign_is_read_as_a_string() -> None:
    """prometheus-operator's CRDs list the relabel action ``=``, YAML 1.1's "value" tag."""
    (doc,) = observe.manifests("kind: X\nenum:\n  - =\n  - '!='\n")
    assert doc["enum"] == ["=", "!="]
