"""Issue 8's docs stay true to the code: every condition reason the operator can set has a
row in docs/operations.md's troubleshooting table. (The generated CRD reference is checked
by `make drift`.)"""

from __future__ import annotations

import inspect

from popfleet_operator import errors
from popfleet_operator.status import audits, conditions
from tests.integration.kind_static.conftest import REPO

CONDITION_TYPES = {"Ready", "Reconciling", "Degraded", "TopicSynced", "ModeApplied", "AuditHealthy"}


def reasons() -> set[str]:
    constants = {
        value
        for module in (conditions, audits)
        for name, value in vars(module).items()
        if name.isupper() and isinstance(value, str)
    }
    raised = {
        getattr(cls, "reason", "")
        for cls in vars(errors).values()
        if inspect.isclass(cls) and issubclass(cls, Exception)
    }
    raised.add(errors.KubeError("x", status=500).reason)
    return (constants | raised) - CONDITION_TYPES - {""}


def test_every_reason_has_a_troubleshooting_row() -> None:
    text = (REPO / "docs" / "operations.md").read_text()
    table = text[text.index("## Troubleshooting by condition reason") :]
    missing = sorted(r for r in reasons() if f"`{r}`" not in table)
    assert missing == [], f"docs/operations.md has no row for {missing}"
    assert len(reasons()) > 20
