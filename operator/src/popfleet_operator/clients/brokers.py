"""Admin API connections to broker pods, kept per (endpoint, token) and reused.

The operator dials each broker's **pod IP** and admin port (``BrokerPod.endpoint``), never
a Service address. ``connect`` is injectable: production builds ``popfleet_api`` clients,
unit tests hand in ``InMemoryBrokerAdmin`` instances (STYLE §5). A pod that changed IP
simply gets a new entry; entries not used for ``idle_s`` are closed by :meth:`close_idle`,
which every reconcile round calls first (``handlers.runtime.close_idle``), so channels to
the IPs of replaced pods do not pile up. ``clock`` is injectable for tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from popfleet_api.client import BrokerAdmin, BrokerAdminApi
from popfleet_operator.model import names
from popfleet_operator.model.observations import BrokerPod

Connect = Callable[[str, str | None], BrokerAdminApi]


def connect_grpc(timeout_s: float) -> Connect:
    def connect(endpoint: str, token: str | None) -> BrokerAdminApi:
        return BrokerAdmin(endpoint, token=token, timeout_s=timeout_s)

    return connect


@dataclass
class BrokerPool:
    connect: Connect
    idle_s: float = 600.0
    clock: Callable[[], float] = time.monotonic
    _admins: dict[tuple[str, str | None], tuple[BrokerAdminApi, float]] = field(
        default_factory=dict
    )

    def admin(self, endpoint: str, token: str | None) -> BrokerAdminApi:
        key = (endpoint, token)
        now = self.clock()
        entry = self._admins.get(key)
        admin = entry[0] if entry else self.connect(endpoint, token)
        self._admins[key] = (admin, now)
        return admin

    def for_pods(self, pods: Iterable[BrokerPod], token: str | None) -> dict[str, BrokerAdminApi]:
        """Broker name -> admin API, for the pods that have an IP."""
        out = {}
        for pod in pods:
            endpoint = pod.endpoint(names.ADMIN_PORT)
            if endpoint and not pod.terminating:
                out[pod.name] = self.admin(endpoint, token)
        return out

    async def close_idle(self) -> None:
        now = self.clock()
        for key, (admin, used) in list(self._admins.items()):
            if now - used > self.idle_s:
                del self._admins[key]
                await admin.close()

    async def close(self) -> None:
        admins, self._admins = list(self._admins.values()), {}
        for admin, _ in admins:
            await admin.close()
