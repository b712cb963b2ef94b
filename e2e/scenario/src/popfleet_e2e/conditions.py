"""Reading and awaiting kstatus-style conditions on popfleet custom resources.

A condition counts only when its ``observedGeneration`` is the object's current generation, so
a step never mistakes the answer to an earlier spec for the answer to its own change.
"""

from __future__ import annotations

from collections.abc import Callable

from popfleet_e2e import waits
from popfleet_e2e.access import ClusterAccess, Obj


def condition(obj: Obj | None, type_: str) -> Obj:
    for found in ((obj or {}).get("status") or {}).get("conditions") or []:
        if found.get("type") == type_:
            return dict(found)
    return {}


def holds(obj: Obj | None, type_: str, status: str = "True") -> bool:
    found = condition(obj, type_)
    generation = (obj or {}).get("metadata", {}).get("generation")
    return found.get("status") == status and found.get("observedGeneration") == generation


def summary(obj: Obj | None) -> str:
    """``Type=Status(Reason)`` for each condition: what a timeout message shows."""
    found = ((obj or {}).get("status") or {}).get("conditions") or []
    return ", ".join(f"{c['type']}={c['status']}({c.get('reason', '')})" for c in found)


def wait(
    access: ClusterAccess,
    kind: str,
    name: str,
    type_: str,
    *,
    status: str = "True",
    timeout_s: float = 120,
    also: Callable[[Obj], bool] = lambda _: True,
    what: str = "",
) -> Obj:
    """Wait until ``kind/name`` has ``type_=status`` for its generation and ``also`` holds."""
    last: list[Obj | None] = [None]

    def check() -> Obj | None:
        obj = access.get_or_none(kind, name)
        last[0] = obj
        return obj if obj is not None and holds(obj, type_, status) and also(obj) else None

    return waits.until(
        check,
        timeout_s=timeout_s,
        what=f"{kind}/{name} {type_}={status}{' and ' + what if what else ''}",
        seen=lambda: f"conditions: {summary(last[0])}; status: {(last[0] or {}).get('status')}",
    )
