"""values.yaml and values.schema.json: every value documented, bad values refused."""

from __future__ import annotations

import re

import pytest

from tests.unit.operator.chart.rendering import CHART, helm


def test_every_value_is_documented() -> None:
    """Each key with a value at the top two levels has a `# --` line just above it
    (deeper keys are examples inside a documented value, like resources.requests.cpu)."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    for number, line in enumerate(lines):
        key = re.match(r"^ {0,2}([A-Za-z][A-Za-z0-9]*):\s*(\S.*)?$", line)
        if key is None or key.group(2) is None:
            continue  # not a key, or a mapping header whose values are checked themselves
        previous = lines[number - 1].strip()
        assert previous.startswith("# --"), f"values.yaml:{number + 1} {key.group(1)} undocumented"


@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        ("operator.logLevel=LOUD", "operator.logLevel"),
        ("replicaCount=-1", "replicaCount"),
        ("image.pullPolicy=Sometimes", "image.pullPolicy"),
        ("surprise=1", "surprise"),
    ],
)
def test_schema_refuses_bad_values(value: str, complaint: str) -> None:
    done = helm("template", "rel", str(CHART), "--kube-version", "1.33.0", "--set", value)
    assert done.returncode != 0
    assert complaint in done.stderr


def test_lint() -> None:
    done = helm("lint", str(CHART), "--kube-version", "1.33.0")
    assert done.returncode == 0, done.stdout + done.stderr
