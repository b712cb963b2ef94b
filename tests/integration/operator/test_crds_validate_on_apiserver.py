"""The CRDs in crds/ on a real kube-apiserver: examples accepted, bad examples refused readably.

The CRDs come from the Helm release (the chart's copy of crds/). Each file in
``crds/bad_examples/`` says on an ``# expect:`` line a piece of the message the
apiserver must answer; the transition rules (queues never shrink, clusterRef immutable) are
checked with patches of an accepted example. The operator (installed by the same release)
reconciles what the examples create; its log is checked after each test too.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from popfleet_testbed import cluster, errors

CRDS = Path(__file__).resolve().parents[3] / "crds"
BAD = sorted((CRDS / "bad_examples").glob("*.yaml"))

pytestmark = [pytest.mark.timeout(180), pytest.mark.usefixtures("operator_log_clean")]


def expectation(path: Path) -> str:
    for line in path.read_text().splitlines():
        if line.startswith("# expect:"):
            return line.removeprefix("# expect:").strip()
    raise AssertionError(f"{path.name} has no '# expect:' line")


@pytest.fixture(scope="module")
def crds_installed(popfleet_release: cluster.Cluster) -> cluster.Cluster:
    """The CRDs as the chart installed them (generated from crds/, drift-checked)."""
    popfleet_release.kubectl(
        "wait",
        "--for=condition=Established",
        "crd",
        "-l",
        "app.kubernetes.io/part-of=popfleet",
        "--timeout=60s",
    )
    return popfleet_release


def test_every_example_is_accepted(crds_installed: cluster.Cluster, testbed_namespace: str) -> None:
    out = crds_installed.kubectl(
        "apply", "-n", testbed_namespace, "--dry-run=server", "-f", str(CRDS / "examples")
    )
    assert out.count("created (server dry run)") == len(list((CRDS / "examples").glob("*.yaml")))


def test_defaults_are_filled_in(crds_installed: cluster.Cluster, testbed_namespace: str) -> None:
    crds_installed.kubectl("apply", "-n", testbed_namespace, "-f", str(CRDS / "examples"))
    group = yaml.safe_load(
        crds_installed.kubectl("get", "-n", testbed_namespace, "cg", "billing", "-o", "yaml")
    )
    assert group["spec"]["popShareQueueNum"] == 0
    assert group["spec"]["deletionPolicy"] == "Retain"
    assert group["spec"]["retryPolicy"]["type"] == "EXPONENTIAL"
    assert group["spec"]["topics"][0]["filterType"] == "TAG"
    listing = crds_installed.kubectl("get", "-n", testbed_namespace, "popfleet")
    for column in ("MODE", "SHARE", "SYNCED", "LAG", "BACKLOG", "QUEUES", "BROKERS", "READY"):
        assert column in listing


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_example_is_refused_with_its_message(
    crds_installed: cluster.Cluster, testbed_namespace: str, path: Path
) -> None:
    with pytest.raises(errors.TestbedError) as refused:
        crds_installed.kubectl("apply", "-n", testbed_namespace, "-f", str(path))
    assert expectation(path) in str(refused.value)


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ('{"spec":{"queues":4}}', "queues may only grow"),
        ('{"spec":{"clusterRef":{"name":"other"}}}', "clusterRef is immutable"),
    ],
)
def test_topic_transition_rules(
    crds_installed: cluster.Cluster, testbed_namespace: str, patch: str, message: str
) -> None:
    crds_installed.kubectl(
        "apply", "-n", testbed_namespace, "-f", str(CRDS / "examples/topic.yaml")
    )
    with pytest.raises(errors.TestbedError) as refused:
        crds_installed.kubectl(
            "patch", "-n", testbed_namespace, "topic", "orders", "--type", "merge", "-p", patch
        )
    assert message in str(refused.value)
    crds_installed.kubectl(
        "patch",
        "-n",
        testbed_namespace,
        "topic",
        "orders",
        "--type",
        "merge",
        "-p",
        '{"spec":{"queues":16}}',
    )
