"""templates/deployment.yaml: the operator pod, its settings and its hardening."""

from __future__ import annotations

from tests.unit.operator.chart.rendering import one, render


def env(docs: list[dict[str, object]]) -> dict[str, str]:
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container["env"]}


def test_defaults() -> None:
    docs = render()
    deployment = one(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "ghcr.io/popfleet/operator:0.1.0"
    assert deployment["spec"]["replicas"] == 1
    assert pod["serviceAccountName"] == "rel-popfleet"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    values = env(docs)
    assert values["POPFLEET_PEERING_NAME"] == "rel-popfleet"
    assert values["POPFLEET_NAMESPACES"] == ""
    assert values["POPFLEET_RESYNC_INTERVAL_S"] == "60"
    assert values["POPFLEET_VERIFY_INTERVAL_S"] == "900"
    assert values["POPFLEET_METRICS_LISTEN"] == "$(POD_IP):9090"


def test_selector_has_nothing_version_ish() -> None:
    deployment = one(render(), "Deployment")
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector == {
        "app.kubernetes.io/name": "popfleet-operator",
        "app.kubernetes.io/instance": "rel",
    }
    labels = deployment["metadata"]["labels"]
    assert labels["app.kubernetes.io/version"] == "0.1.0"
    assert labels["helm.sh/chart"] == "popfleet-0.1.0"


def test_values_reach_the_pod() -> None:
    docs = render(
        "image.tag=dev",
        "replicaCount=2",
        "peering.enabled=false",
        "operator.watchNamespaces={a,b}",
        "operator.metricsPort=0",
        "operator.resyncIntervalSeconds=5",
        "operator.verifyIntervalSeconds=120",
    )
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":dev")
    values = env(docs)
    assert values["POPFLEET_PEERING_NAME"] == ""
    assert values["POPFLEET_NAMESPACES"] == "a,b"
    assert values["POPFLEET_RESYNC_INTERVAL_S"] == "5"
    assert values["POPFLEET_VERIFY_INTERVAL_S"] == "120"
    assert "POPFLEET_METRICS_LISTEN" not in values
    assert not [d for d in docs if d["kind"] == "Service"]
