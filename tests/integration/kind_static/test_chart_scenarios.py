"""Every chart values scenario of e2e/kind renders, lints and is accepted by a real apiserver.

The kind run cannot happen here (no Docker), so what it would install is checked statically:
``helm lint --strict`` and ``helm template`` of each ``e2e/kind/values/*.yaml``, then a
server-side dry-run (admission, schemas, RBAC objects) of every rendered object, of every
``crds/examples/`` file and of the scenario manifests in ``e2e/kind/manifests/``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from popfleet_testbed import cluster, waiting
from tests.integration.kind_static.conftest import CHART, KIND, KUBE_VERSION, REPO
from tests.integration.kind_static.conftest import load as load_module

VALUES = sorted((KIND / "values").glob("*.yaml"))
MANIFESTS = sorted((KIND / "manifests").glob("*.yaml"))
EXAMPLES = sorted((REPO / "crds" / "examples").glob("*.yaml"))
Obj = dict[str, Any]

pytestmark = pytest.mark.timeout(240)


def render(testbed: cluster.Cluster, values: Path, namespace: str) -> list[Obj]:
    out = testbed.helm(
        "template", "popfleet", str(CHART), "-n", namespace, "-f", str(values),
        "--kube-version", KUBE_VERSION,
    )  # fmt: skip
    return [doc for doc in yaml.safe_load_all(out) if doc]


def dry_run(testbed: cluster.Cluster, docs: list[Obj]) -> list[str]:
    """Server-side dry-run apply; the objects the apiserver accepted, as kind/name lines.

    Every namespaced document must name its namespace (they may differ).
    """
    listing = {"apiVersion": "v1", "kind": "List", "items": docs}
    out = testbed.kubectl("apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(listing))
    return [line for line in out.splitlines() if line.endswith("(server dry run)")]


def test_every_scenario_has_values_and_the_defaults_point_at_kind_images() -> None:
    assert {p.stem for p in VALUES} >= {"kind", "minimal", "auth-tls", "audit"}
    for path in VALUES:
        image = yaml.safe_load(path.read_text())["image"]
        assert image["pullPolicy"] == "Never", f"{path.name}: kind-loaded images are never pulled"


@pytest.mark.parametrize("values", VALUES, ids=[p.stem for p in VALUES])
def test_helm_lint_strict(testbed: cluster.Cluster, values: Path) -> None:
    out = testbed.helm(
        "lint", "--strict", str(CHART), "-f", str(values), "--kube-version", KUBE_VERSION
    )
    assert "1 chart(s) linted, 0 chart(s) failed" in out


@pytest.mark.parametrize("values", VALUES, ids=[p.stem for p in VALUES])
def test_rendered_scenario_is_accepted_by_the_apiserver(
    popfleet_crds: cluster.Cluster, monitoring_crds: cluster.Cluster, testbed_namespace: str,
    values: Path,
) -> None:  # fmt: skip
    docs = render(popfleet_crds, values, testbed_namespace)
    wanted = yaml.safe_load(values.read_text())
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    image = wanted["image"]
    assert container["image"] == f"{image['repository']}:{image['tag']}"
    assert container["imagePullPolicy"] == "Never"
    with scenario_namespaces(popfleet_crds, docs):
        accepted = dry_run(popfleet_crds, docs)
    assert len(accepted) == len(docs), "\n".join(accepted)


def test_examples_and_scenario_manifests_are_accepted(
    popfleet_crds: cluster.Cluster, testbed_namespace: str
) -> None:
    examples = [doc for path in EXAMPLES for doc in load(path)]
    for doc in examples:  # they name no namespace: `kubectl apply -n NS -f crds/examples`
        doc["metadata"]["namespace"] = testbed_namespace
    docs = examples + [doc for path in MANIFESTS for doc in load(path)]
    kinds = {d["kind"] for d in docs}
    assert {"BrokerCluster", "Topic", "ConsumerGroup", "Secret"} <= kinds
    with scenario_namespaces(popfleet_crds, docs):
        accepted = dry_run(popfleet_crds, docs)
    assert len(accepted) == len(docs), "\n".join(accepted)


def load(path: Path) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


class scenario_namespaces:  # noqa: N801 - used as a context manager, reads like one
    """Namespaces the documents live in (besides the test's own), created for real and removed.

    A dry-run cannot create a namespace and place objects in it in one apply.
    """

    def __init__(self, testbed: cluster.Cluster, docs: list[Obj]) -> None:
        self.testbed = testbed
        declared = {d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"}
        used = {d["metadata"].get("namespace") for d in docs} - {None}
        self.names = sorted(declared | used)
        self.created: list[str] = []

    def __enter__(self) -> None:
        for name in self.names:
            if self.testbed.admin.get_or_none(f"/api/v1/namespaces/{name}") is None:
                self.testbed.kubectl("create", "namespace", name)
                self.created.append(name)

    def __exit__(self, *exc: object) -> None:
        for name in self.created:
            self.testbed.delete_namespace(name)
        for name in self.created:  # gone, so that the next test can create it afresh
            waiting.until(self._gone(name), timeout_s=90, what=f"namespace {name} deleted")

    def _gone(self, name: str) -> Callable[[], bool]:
        return lambda: self.testbed.admin.get_or_none(f"/api/v1/namespaces/{name}") is None


def test_proxy_pod_is_accepted_and_admitted_by_the_brokers_network_policy(
    popfleet_crds: cluster.Cluster,
) -> None:
    """The kind run's proxy pod (proxy_tunnel.py) is valid, and the NetworkPolicy the operator
    builds for brokers admits it to the admin port (else the scenario's admin reads fail)."""
    from popfleet_operator.builders import networkpolicies  # noqa: PLC0415
    from popfleet_operator.model import names  # noqa: PLC0415
    from popfleet_operator.model.specs import ObjectRef, parse_cluster  # noqa: PLC0415

    tunnel = load_module("proxy_tunnel")
    docs = tunnel.manifests(
        image="ghcr.io/popfleet/operator:0.1.0", pull_policy="Never", allow_cidr="10.244.0.0/16"
    )
    with scenario_namespaces(popfleet_crds, docs):
        accepted = dry_run(popfleet_crds, docs)
    assert len(accepted) == len(docs), "\n".join(accepted)

    (pod,) = [d for d in docs if d["kind"] == "Pod"]
    owner = ObjectRef("BrokerCluster", "apps", "demo", "u", 1, "2026-11-21T00:00:00Z")
    policy = networkpolicies.build(owner, parse_cluster({}))
    (admin_rule,) = [
        rule
        for rule in policy["spec"]["ingress"]
        if {"port": names.ADMIN_PORT, "protocol": "TCP"} in rule["ports"]
    ]
    labels = pod["metadata"]["labels"]
    assert any(
        "namespaceSelector" in peer
        and all(labels.get(k) == v for k, v in peer["podSelector"]["matchLabels"].items())
        for peer in admin_rule["from"]
    ), admin_rule
