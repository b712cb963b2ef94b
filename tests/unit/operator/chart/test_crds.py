"""templates/crds/: generated from crds/, upgraded with the release, kept on uninstall."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.unit.operator.chart.rendering import CHART, by_kind, render

SOURCE = Path(__file__).resolve().parents[4] / "crds"


def test_rendered_crds_equal_the_source() -> None:
    rendered = {c["metadata"]["name"]: c for c in by_kind(render(), "CustomResourceDefinition")}
    for path in sorted(SOURCE.glob("*.yaml")):
        source = yaml.safe_load(path.read_text())
        got = rendered.pop(source["metadata"]["name"])
        assert got["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
        assert got["spec"] == source["spec"]
    assert rendered == {}


def test_crds_can_be_left_out_or_not_kept() -> None:
    assert not by_kind(render("crds.install=false"), "CustomResourceDefinition")
    for crd in by_kind(render("crds.keep=false"), "CustomResourceDefinition"):
        assert not crd["metadata"].get("annotations")


def test_peering_crds_ship_in_the_chart_crds_dir() -> None:
    docs = list(yaml.safe_load_all((CHART / "crds" / "kopf.dev_peerings.yaml").read_text()))
    assert sorted(d["spec"]["names"]["kind"] for d in docs) == ["ClusterKopfPeering", "KopfPeering"]
