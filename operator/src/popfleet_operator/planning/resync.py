"""When a resync tick of a Topic or ConsumerGroup may skip the brokers.

Every object's timer ticks every ``POPFLEET_RESYNC_INTERVAL_S`` (60 s). Reading every broker
back on every tick made the operator's steady CPU grow with the number of objects although
nothing changed. A tick therefore skips the per-broker reads when both hold:

1. :func:`steady`: the object's status already says its domain condition is True for the
   current generation, and each expected broker's config epoch, as the brokers answer now
   (one ``info`` per broker per cluster, shared by all the cluster's objects), is the one
   the status recorded: no broker came back empty or new since the last full round;
2. not :func:`verify_due`: a full read-back happens once per ``verify_s`` anyway (drift
   the epochs cannot show, such as an admin tool deleting a topic), each object at its
   own phase (from its uid) so that they do not all verify on the same tick.

Pure: the caller (``handlers.fanning``) passes the status, the epochs, the time.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any


def confirmed(status: Mapping[str, Any], *, domain: str, generation: int) -> bool:
    """The status says the domain condition is True for ``generation``."""
    if status.get("observedGeneration") != generation:
        return False
    condition = next((c for c in status.get("conditions") or [] if c.get("type") == domain), None)
    return (
        condition is not None
        and condition.get("status") == "True"
        and condition.get("observedGeneration") == generation
    )


def steady(
    status: Mapping[str, Any],
    *,
    domain: str,
    generation: int,
    expected: Sequence[str],
    epochs: Mapping[str, str],
) -> bool:
    """Step 1: the status says synced for ``generation`` and no broker's epoch moved."""
    if not expected or not confirmed(status, domain=domain, generation=generation):
        return False
    recorded = {
        str(b.get("name")): str(b.get("configEpoch") or "") for b in status.get("brokers") or []
    }
    return set(recorded) == set(expected) and all(
        epochs.get(broker) and epochs[broker] == recorded[broker] for broker in expected
    )


def phase_s(uid: str, *, verify_s: float) -> float:
    """This object's offset within each verify period, spread evenly by its uid."""
    fraction = int.from_bytes(hashlib.sha256(uid.encode()).digest()[:4], "big") / 2**32
    return fraction * verify_s


def slot(uid: str, *, now_s: float, verify_s: float) -> int:
    """The verify period ``now_s`` falls in, for this object (periods start at its phase)."""
    return int((now_s + phase_s(uid, verify_s=verify_s)) // verify_s)


def verify_due(last_slot: int | None, uid: str, *, now_s: float, verify_s: float) -> bool:
    """Step 2: no full round yet in this object's current verify period (None: none ever)."""
    return last_slot != slot(uid, now_s=now_s, verify_s=verify_s)
