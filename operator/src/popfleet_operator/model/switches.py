"""The ``popfleet.io`` switches a user puts on a CR as annotations, read from its raw body.

``paused`` (``popfleet.io/paused: "true"``): leave brokers and children alone and say so in
status; ``unmanaged`` (``popfleet.io/managed: "false"``): never touch the brokers for this
object, not even on delete. Values compare case-insensitively. Callers: the reconcilers in
``handlers`` (every kind checks them before acting).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from popfleet_operator.model import names


def annotation(body: Mapping[str, Any], key: str) -> str:
    """The annotation's value, lower-cased; "" when absent."""
    return str((body.get("metadata", {}).get("annotations") or {}).get(key, "")).lower()


def paused(body: Mapping[str, Any]) -> bool:
    return annotation(body, names.PAUSED) == "true"


def unmanaged(body: Mapping[str, Any]) -> bool:
    return annotation(body, names.MANAGED) == "false"
