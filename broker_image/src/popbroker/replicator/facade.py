"""The store as a replica serves it to popack and revive (issue 18): every
call goes to the local store, except writes to the log, which go through the leader's SYNC
appends (:class:`~popbroker.replicator.wire.SyncAppends`) and are refused on a follower
(``NotLeader``: nothing is written that the leader's log would not hold). Consumer offsets
and config are not replicated yet (step 4 of the design note)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from popbroker.replicator.replica import Replica
from popbroker.store.api import AppendResult, MessageToAppend
from popbroker.store.errors import NotLeader


class ReplicatedStore:
    """A ``StoreApi`` over a replica's local store (module docstring)."""

    def __init__(self, replica: Replica) -> None:
        self._replica = replica

    def __getattr__(self, name: str) -> Any:
        return getattr(self._replica.store, name)

    async def append(self, messages: Sequence[MessageToAppend]) -> list[AppendResult]:
        appends = self._replica.appends
        if appends is None:
            raise NotLeader(f"{self._replica.name} does not lead its broker set now")
        return await appends.append(messages)

    async def append_records(self, records: Sequence[bytes]) -> list[AppendResult]:
        appends = self._replica.appends
        if appends is None:
            raise NotLeader(f"{self._replica.name} does not lead its broker set now")
        return await appends.append_records(records)
