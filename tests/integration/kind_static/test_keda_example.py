"""The KEDA example (``crds/examples/keda/pop-consumers.yaml``, issue 19) against KEDA's CRDs.

* The testbed's real apiserver accepts its Deployment and ScaledObject (server-side dry-run,
  KEDA v2.21.0's own ScaledObject CRD from the Go module proxy: ``make keda-crds``).
* The ScaledObject scales the Deployment it ships, on a Prometheus trigger whose query is
  valid PromQL (promtool) and reads the lag of the group and topic the consumers use, in the
  cluster of the other examples. That the query returns the lag from a real scrape is
  ``tests/integration/monitoring/test_real_prometheus.py``'s.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from popfleet_testbed import cluster, errors
from tests.integration.kind_static.conftest import REPO
from tests.integration.monitoring.prometheus import tool

EXAMPLES = REPO / "crds" / "examples"
EXAMPLE = EXAMPLES / "keda" / "pop-consumers.yaml"
NAMESPACE = "shop"
Obj = dict[str, Any]

pytestmark = pytest.mark.timeout(180)


def documents() -> dict[str, Obj]:
    return {d["kind"]: d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d}


def scaled_object_query() -> str:
    (trigger,) = documents()["ScaledObject"]["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    query: str = trigger["metadata"]["query"]
    return query


@pytest.fixture(scope="module")
def keda_crds(testbed: cluster.Cluster) -> Iterator[cluster.Cluster]:
    """KEDA's ScaledObject CRD and the example's namespace on the testbed apiserver."""
    crds = tool("POPFLEET_KEDA_CRDS", "keda-crds")
    name = "scaledobjects.keda.sh"
    had_crd = testbed.admin.get_or_none(
        f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
    )
    had_namespace = testbed.admin.get_or_none(f"/api/v1/namespaces/{NAMESPACE}")
    testbed.kubectl("apply", "--server-side", "-f", str(crds / "keda.sh_scaledobjects.yaml"))
    testbed.kubectl("wait", "--for=condition=Established", "crd", name, "--timeout=60s")
    if had_namespace is None:
        testbed.kubectl("create", "namespace", NAMESPACE)
    yield testbed
    if had_crd is None:
        testbed.kubectl("delete", "crd", name, "--ignore-not-found")
    if had_namespace is None:
        testbed.kubectl("delete", "namespace", NAMESPACE, "--wait=false")


def test_the_apiserver_accepts_the_example(keda_crds: cluster.Cluster) -> None:
    out = keda_crds.kubectl("apply", "--dry-run=server", "-n", NAMESPACE, "-f", str(EXAMPLE))
    accepted = [line for line in out.splitlines() if line.endswith("created (server dry run)")]
    assert len(accepted) == 2, out


def test_a_bad_scaled_object_is_refused(keda_crds: cluster.Cluster) -> None:
    """The dry-run above checks something: KEDA's schema refuses a trigger with no type."""
    bad = documents()["ScaledObject"]
    del bad["spec"]["triggers"][0]["type"]
    with pytest.raises(errors.TestbedError, match=r"triggers\[0\]\.type: Required value"):
        keda_crds.kubectl(
            "apply", "--dry-run=server", "-n", NAMESPACE, "-f", "-", stdin=yaml.safe_dump(bad)
        )


def test_it_scales_its_consumers_on_their_groups_lag(tmp_path: Path) -> None:
    docs = documents()
    deployment, scaled = docs["Deployment"], docs["ScaledObject"]
    assert scaled["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert scaled["spec"]["maxReplicaCount"] > scaled["spec"]["minReplicaCount"] >= 1
    env = {
        e["name"]: e["value"]
        for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    group = yaml.safe_load((EXAMPLES / "consumergroup.yaml").read_text())
    cluster_name = yaml.safe_load((EXAMPLES / "brokercluster.yaml").read_text())["metadata"]["name"]
    assert env["ROCKETMQ_GROUP"] == group["metadata"]["name"]
    assert env["ROCKETMQ_TOPIC"] in {t["name"] for t in group["spec"]["topics"]}
    assert env["ROCKETMQ_ENDPOINTS"] == f"{cluster_name}.{NAMESPACE}.svc:8081"

    query = scaled_object_query()
    matchers = dict(re.findall(r'(\w+)="([^"]*)"', query))
    assert query.lstrip().startswith("sum(popfleet_broker_consumer_lag_messages{")
    assert matchers == {
        "namespace": NAMESPACE,
        "cluster": cluster_name,
        "group": env["ROCKETMQ_GROUP"],
        "topic": env["ROCKETMQ_TOPIC"],
    }
    promtool = tool("POPFLEET_PROMTOOL", "prometheus-bin")
    rules = {"groups": [{"name": "keda", "rules": [{"record": "keda:query", "expr": query}]}]}
    (tmp_path / "keda.rules.yaml").write_text(yaml.safe_dump(rules))
    done = subprocess.run(
        [str(promtool), "check", "rules", "keda.rules.yaml"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
