"""Config epochs in ``status.brokers``: which brokers came back with a different one.

A broker's config epoch changes when its stored configuration starts afresh (an empty volume,
a new pod on a new disk). Both ``status.brokers`` lists, the BrokerCluster's and each Topic's
or ConsumerGroup's, keep the last epoch seen per broker, so comparing this round's answers
with the last status tells who must get everything re-applied. Callers: ``handlers.clusters``
(the ``BrokerConfigEpochChanged`` Event) and ``handlers.fanning`` (the ``Reapplied`` Event).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def epoch_changes(
    previous: Sequence[Mapping[str, Any]], current: Mapping[str, str]
) -> list[tuple[str, str, str]]:
    """(broker, old epoch, new epoch) for brokers whose config epoch changed since last time."""
    before = {str(b.get("name")): str(b.get("configEpoch", "")) for b in previous}
    return [
        (broker, before[broker], epoch)
        for broker, epoch in sorted(current.items())
        if epoch and before.get(broker) and before[broker] != epoch
    ]
