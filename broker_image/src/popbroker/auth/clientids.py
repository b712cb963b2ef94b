"""Which access key owns a client id (``x-mq-client-id``).

The broker keys client state by the client id header (telemetry settings,
heartbeats, terminations, and so the queue assignment of PULL groups). With
credentials on, the first access key seen with a client id owns it; another key
presenting the same id is :class:`~popbroker.auth.errors.Forbidden`, so one
tenant cannot terminate or impersonate another's consumers. Bounded: the
least recently seen ids are forgotten past ``max_entries`` (client ids carry a
process start time, so a restarted client has a new one).
"""

from __future__ import annotations

from collections import OrderedDict

from popbroker.auth.errors import Forbidden

DEFAULT_MAX_ENTRIES = 100_000


class ClientIdOwners:
    """First-come ownership of client ids by access key (see the module docstring)."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be positive")
        self._owners: OrderedDict[str, str] = OrderedDict()
        self._max_entries = max_entries

    def claim(self, client_id: str | None, access_key: str) -> None:
        """Record or check that ``access_key`` uses ``client_id`` (None: nothing to check)."""
        if not client_id:
            return
        owner = self._owners.get(client_id)
        if owner is None:
            self._owners[client_id] = access_key
            if len(self._owners) > self._max_entries:
                self._owners.popitem(last=False)
            return
        if owner != access_key:
            raise Forbidden(f"client id {client_id} belongs to another access key")
        self._owners.move_to_end(client_id)

    def __len__(self) -> int:
        return len(self._owners)
