"""How ``popfleet-admin`` prints per-broker results: aligned tables or one JSON document.

A command's answer from one broker is a list of sections, each a title and
rows (flat dicts of str/int/bool/None). The table output prints, per section,
one table over every broker with a ``BROKER`` and a ``STATUS`` column; a broker
that failed gets one ``FAILED`` row with the error instead of its rows. The
JSON output is one object::

    {"ok": false,
     "brokers": [{"broker": "h:1", "ok": true, "result": {"topics": [{...}]}},
                 {"broker": "h:2", "ok": false,
                  "error": {"code": "UNAVAILABLE", "reason": "", "retriable": true,
                            "message": "..."}}]}

Pure: builds strings, prints nothing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from popfleet_api import errors

Cell = str | int | float | bool | None
Row = dict[str, Cell]


@dataclass(frozen=True, slots=True)
class Section:
    title: str
    rows: list[Row] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class BrokerResult:
    """What one broker answered: sections, or the error that ended its attempt."""

    broker: str
    sections: list[Section] = field(default_factory=list)
    error: errors.AdminError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def _cell(value: Cell) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def render_table(results: Sequence[BrokerResult]) -> str:
    """Per section, one aligned table over all brokers (see the module docstring)."""
    titles: list[str] = []
    for result in results:
        for section in result.sections:
            if section.title not in titles:
                titles.append(section.title)
    if not titles:
        titles = [""]
    blocks = []
    for title in titles:
        columns: list[str] = []
        lines: list[list[str]] = []
        failures: list[list[str]] = []
        for result in results:
            if result.error is not None:
                failures.append([result.broker, "FAILED", str(_error_text(result.error))])
                continue
            rows = [r for s in result.sections if s.title == title for r in s.rows]
            for row in rows:
                for key in row:
                    if key not in columns:
                        columns.append(key)
            if not rows:
                lines.append([result.broker, "ok"])
            for row in rows:
                lines.append([result.broker, "ok", *(_cell(row.get(c)) for c in columns)])
        header = ["BROKER", "STATUS", *(c.upper().replace("_", "-") for c in columns)]
        table = [header, *lines]
        widths = [max(len(r[i]) for r in table if i < len(r)) for i in range(len(header))]
        for failure in failures:  # the error text spans the columns; it never widens them
            widths[0] = max(widths[0], len(failure[0]))
            widths[1] = max(widths[1], len(failure[1]))
        text = [
            "  ".join(
                cell.ljust(widths[i]) if i < len(widths) else cell for i, cell in enumerate(r)
            ).rstrip()
            for r in [*table, *failures]
        ]
        blocks.append((f"# {title}\n" if title and len(titles) > 1 else "") + "\n".join(text))
    return "\n\n".join(blocks)


def _error_text(error: errors.AdminError) -> str:
    reason = f" [{error.reason}]" if error.reason else ""
    return f"{error.code}{reason}: {error.message}"


def render_json(results: Sequence[BrokerResult]) -> str:
    """One JSON document for scripts (see the module docstring)."""
    brokers: list[dict[str, object]] = []
    for result in results:
        if result.error is not None:
            brokers.append(
                {
                    "broker": result.broker,
                    "ok": False,
                    "error": {
                        "code": result.error.code,
                        "reason": result.error.reason,
                        "retriable": result.error.retriable,
                        "message": result.error.message,
                    },
                }
            )
        else:
            brokers.append(
                {
                    "broker": result.broker,
                    "ok": True,
                    "result": {s.title: s.rows for s in result.sections},
                }
            )
    document = {"ok": all(r.ok for r in results), "brokers": brokers}
    return json.dumps(document, indent=2, sort_keys=False)
