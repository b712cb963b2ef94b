"""``broker_image/front/testdata/appends.json`` is what the Python reference answers today
(``go test`` in ``broker_image/front`` compares popfront's append items with it)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from popbroker.store import format as fmt
from tests.unit.services import front_appends

FIXTURE = Path(__file__).resolve().parents[3] / "broker_image/front/testdata/appends.json"


def _decoded(case: dict[str, Any]) -> tuple[str, str, Any]:
    """A case with its record decoded (user properties come from a map: no fixed order)."""
    raw = base64.b64decode(case["record"])
    record = fmt.parse_unplaced(raw) if raw else None
    fields = None if record is None else (record.topic, record.properties, record.body_size)
    # the error's type: with two bad keys, which one it names depends on the map's order
    return case["message"], case["error"].partition(":")[0], fields


def test_the_fixture_is_the_references_answer_today() -> None:
    kept = [_decoded(case) for case in json.loads(FIXTURE.read_text())["cases"]]
    assert kept == [_decoded(case) for case in front_appends.cases()["cases"]], (
        "regenerate: .venv/bin/python -m tests.unit.services.front_appends "
        "> broker_image/front/testdata/appends.json"
    )


def test_the_fixture_has_messages_the_reference_accepts_and_refuses() -> None:
    errors = [case["error"] for case in front_appends.cases()["cases"]]
    assert errors.count("") >= 20
    assert len(errors) - errors.count("") >= 20
