"""The chart's monitoring objects (issue 19): PodMonitors, PrometheusRule and dashboards.

* Off by default: a default render has none of them (their CRDs may be absent).
* Switched on, they render and the testbed's real apiserver accepts them (server-side
  dry-run) against prometheus-operator's own CRDs (v0.85.0, from the Go module proxy:
  ``make monitoring-crds``).
* The rules pass ``promtool check rules`` and the unit tests in ``tests/promtool/``
  (alerts fire on the provoked condition and not before, and resolve; Prometheus 3.16's
  promtool, built from the Go module proxy: ``make prometheus-bin``).
* Every dashboard panel's query is valid PromQL (checked by promtool, the dashboard
  variables replaced by what Grafana would put there) and names only metrics popfleet
  exports (the list in docs/operations.md).

That every query returns series from a real scrape is the kind e2e's business.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from popfleet_testbed import cluster
from tests.integration.kind_static.conftest import CHART, KUBE_VERSION, REPO
from tests.integration.monitoring.prometheus import tool

MONITORING_SETS = [
    "monitoring.podMonitors.enabled=true",
    "monitoring.prometheusRule.enabled=true",
    "monitoring.dashboards.enabled=true",
]
RULE_TESTS = REPO / "tests" / "promtool" / "popfleet_rules_test.yaml"
DASHBOARDS = sorted((CHART / "dashboards").glob("*.json"))
# What Grafana substitutes for the dashboards' variables when the query runs.
VARIABLES = {
    "$__rate_interval": "1m",
    "$namespace": ".*",
    "$cluster": ".*",
    "$pod": "demo-0",
    "$group": "billing",
    "${datasource}": "prometheus",
}
Obj = dict[str, Any]

pytestmark = pytest.mark.timeout(240)


def render(testbed: cluster.Cluster, *sets: str) -> list[Obj]:
    args = [a for s in sets for a in ("--set", s)]
    out = testbed.helm(
        "template", "popfleet", str(CHART), "-n", "popfleet", "--kube-version", KUBE_VERSION,
        *args,
    )  # fmt: skip
    return [doc for doc in yaml.safe_load_all(out) if doc]


def _monitoring(docs: list[Obj]) -> list[Obj]:
    return [
        d
        for d in docs
        if d["apiVersion"].startswith("monitoring.coreos.com/")
        or (d["kind"] == "ConfigMap" and "-dashboard-" in d["metadata"]["name"])
    ]


@pytest.fixture(scope="module")
def monitoring_namespace(monitoring_crds: cluster.Cluster) -> Iterator[cluster.Cluster]:
    """prometheus-operator's CRDs (``conftest.monitoring_crds``) and the namespace the chart
    is rendered for (a dry-run cannot create it)."""
    testbed = monitoring_crds
    had_namespace = testbed.admin.get_or_none("/api/v1/namespaces/popfleet") is not None
    if not had_namespace:
        testbed.kubectl("create", "namespace", "popfleet")
    yield testbed
    if not had_namespace:
        testbed.kubectl("delete", "namespace", "popfleet", "--wait=false")


def test_nothing_of_monitoring_renders_by_default(testbed: cluster.Cluster) -> None:
    assert _monitoring(render(testbed)) == []


def test_the_monitoring_objects_render_and_the_apiserver_accepts_them(
    monitoring_namespace: cluster.Cluster,
) -> None:
    monitoring_crds = monitoring_namespace
    docs = _monitoring(render(monitoring_crds, *MONITORING_SETS))
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in docs)
    assert kinds == [
        ("ConfigMap", "popfleet-dashboard-popfleet-broker"),
        ("ConfigMap", "popfleet-dashboard-popfleet-consumer-group"),
        ("ConfigMap", "popfleet-dashboard-popfleet-fleet"),
        ("PodMonitor", "popfleet-brokers"),
        ("PodMonitor", "popfleet-operator"),
        ("PrometheusRule", "popfleet"),
    ]
    (brokers,) = [d for d in docs if d["metadata"]["name"] == "popfleet-brokers"]
    ports = [e["port"] for e in brokers["spec"]["podMetricsEndpoints"]]
    assert ports == ["metrics-store", "metrics-popack", "metrics-revive", "metrics-front"]
    assert brokers["spec"]["namespaceSelector"] == {"any": True}
    # the operator's series carry the namespace of the object they describe; the target's
    # (the operator's own) must not replace it (found on kind: it became exported_namespace)
    (operator,) = [d for d in docs if d["metadata"]["name"] == "popfleet-operator"]
    assert [e.get("honorLabels") for e in operator["spec"]["podMetricsEndpoints"]] == [True]
    for config_map in (d for d in docs if d["kind"] == "ConfigMap"):
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        (text,) = config_map["data"].values()
        assert json.loads(text)["uid"].startswith("popfleet-")
    listing = {"apiVersion": "v1", "kind": "List", "items": docs}
    out = monitoring_crds.kubectl(
        "apply", "--dry-run=server", "-n", "popfleet", "-f", "-", stdin=yaml.safe_dump(listing)
    )
    accepted = [line for line in out.splitlines() if line.endswith("(server dry run)")]
    assert len(accepted) == len(docs), out


def test_watched_namespaces_limit_the_brokers_pod_monitor(testbed: cluster.Cluster) -> None:
    docs = render(testbed, *MONITORING_SETS, "operator.watchNamespaces={shop,billing}")
    (brokers,) = [d for d in _monitoring(docs) if d["metadata"]["name"] == "popfleet-brokers"]
    assert brokers["spec"]["namespaceSelector"] == {"matchNames": ["shop", "billing"]}


def _rules(testbed: cluster.Cluster) -> Obj:
    (rule,) = [d for d in render(testbed, *MONITORING_SETS) if d["kind"] == "PrometheusRule"]
    return {"groups": rule["spec"]["groups"]}


def _promtool(promtool: Path, *args: str, cwd: Path) -> str:
    done = subprocess.run(
        [str(promtool), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, f"promtool {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_rules_pass_promtool_and_their_unit_tests(
    testbed: cluster.Cluster, tmp_path: Path
) -> None:
    promtool = tool("POPFLEET_PROMTOOL", "prometheus-bin")
    (tmp_path / "popfleet.rules.yaml").write_text(yaml.safe_dump(_rules(testbed)))
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    out = _promtool(promtool, "check", "rules", "popfleet.rules.yaml", cwd=tmp_path)
    assert "SUCCESS" in out
    _promtool(promtool, "test", "rules", RULE_TESTS.name, cwd=tmp_path)


def test_every_alert_has_a_runbook_section(testbed: cluster.Cluster) -> None:
    operations = (REPO / "docs" / "operations.md").read_text()
    anchors = {
        re.sub(r"[^a-z0-9-]", "", line.lstrip("#").strip().lower().replace(" ", "-"))
        for line in operations.splitlines()
        if line.startswith("#")
    }
    for group in _rules(testbed)["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                anchor = rule["annotations"]["runbook_url"].rpartition("#")[2]
                assert anchor == rule["alert"].lower()
                assert anchor in anchors, f"docs/operations.md has no section {rule['alert']}"


def _queries(dashboard: Obj) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def _substituted(expr: str) -> str:
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, f"a dashboard variable nobody defines in {expr!r}"
    return expr


def test_every_dashboard_query_is_valid_promql_on_our_metrics(tmp_path: Path) -> None:
    promtool = tool("POPFLEET_PROMTOOL", "prometheus-bin")
    operations = (REPO / "docs" / "operations.md").read_text()
    documented = set(re.findall(r"`(popfleet_[a-z_]+)", operations)) | {"up"}
    rules: list[Obj] = []
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        queries = _queries(dashboard)
        assert queries, f"{path.name} has no queries"
        for n, expr in enumerate(queries):
            rules.append(
                {
                    "record": f"dashboard:{path.stem.replace('-', '_')}:{n}",
                    "expr": _substituted(expr),
                }
            )
            for metric in re.findall(r"\b(popfleet_[a-z_]+|up)\b(?=\s*[{\[(])", expr):
                base = re.sub(r"_(bucket|count|sum|total)$", "", metric)
                assert (
                    metric in documented or base in documented or f"{base}_total" in documented
                ), f"{path.name}: {metric} is not a documented metric"
    (tmp_path / "dashboards.rules.yaml").write_text(
        yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]})
    )
    _promtool(promtool, "check", "rules", "dashboards.rules.yaml", cwd=tmp_path)
