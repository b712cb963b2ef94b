"""Generate the chart's templated CRDs from crds/ (the single source; `make drift` compares).

    python operator/scripts/chart_crds.py [OUT_DIR]   (default charts/popfleet/templates/crds)

Why templates and not the chart's crds/ directory: Helm never upgrades what crds/ holds, and
CRDs must follow `helm upgrade` (users complain about exactly that elsewhere). Each CRD is
wrapped in `crds.install` and gets `helm.sh/resource-policy: keep` when `crds.keep` is set,
so uninstalling the chart does not delete every BrokerCluster, Topic and ConsumerGroup.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "crds"
DEFAULT_OUT = ROOT / "charts" / "popfleet" / "templates" / "crds"

HEADER = """\
{{{{- /* Generated from crds/{source} by `make crds-chart`; edit the source, not this file. */}}}}
{{{{- if .Values.crds.install }}}}
"""
FOOTER = "{{- end }}\n"
ANNOTATIONS = """\
  annotations:
    {{- if .Values.crds.keep }}
    helm.sh/resource-policy: keep
    {{- end }}
"""


def render(source: Path) -> str:
    crd = yaml.safe_load(source.read_text())
    body = yaml.safe_dump(crd, sort_keys=False, width=1000, allow_unicode=True)
    if "{{" in body:
        raise SystemExit(f"{source.name}: contains '{{{{', which Helm would treat as a template")
    marker = "metadata:\n"
    head, tail = body.split(marker, 1)
    return HEADER.format(source=source.name) + head + marker + ANNOTATIONS + tail + FOOTER


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else DEFAULT_OUT
    out.mkdir(parents=True, exist_ok=True)
    for source in sorted(SOURCE.glob("*.yaml")):
        (out / source.name).write_text(render(source))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
