"""Admin API connections to broker pods, kept per (endpoint, token) and reused.

The operator dials each broker's **pod IP** and admin port (``BrokerPod.endpoint``), never
a Service address. ``connect`` is injectable: production builds ``popfleet_api`` clients,
unit tests hand in ``InMemoryBrokerAdmin`` instances (STYLE §5). A pod that changed IP
simply gets a new entry; entries not used for ``idle_s`` are closed by :meth:`close_idle`,
which every reconcile round calls first (``handlers.runtime.close_idle``), so channels to
the IPs of replaced pods do not pile up. ``clock`` is injectable for tests.

**Per-broker cap**: at most ``call_limit`` admin calls to one endpoint are under way at a
time (``$POPFLEET_BROKER_CALL_LIMIT``, default 8); further calls wait for a slot. The
admins handed out are :class:`Limited` wrappers that take a slot around each ``async``
method and call the real client only once they hold it, so a call's gRPC deadline
(``$POPFLEET_ADMIN_TIMEOUT_S``, set by ``BrokerAdmin`` when it sends) starts when the call
is sent, not while it queues: a busy broker is slow, not unreachable.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from popfleet_api.client import BrokerAdmin, BrokerAdminApi
from popfleet_operator.model import names
from popfleet_operator.model.observations import BrokerPod

Connect = Callable[[str, str | None], BrokerAdminApi]


def connect_grpc(timeout_s: float) -> Connect:
    def connect(endpoint: str, token: str | None) -> BrokerAdminApi:
        return BrokerAdmin(endpoint, token=token, timeout_s=timeout_s)

    return connect


class Limited:
    """An admin API whose ``async`` methods each hold one of its broker's ``slots``.

    Everything else (``target``, ``close``, the streaming scans) passes through. Typed as
    the wrapped :class:`BrokerAdminApi` by :meth:`BrokerPool.admin`.
    """

    def __init__(self, admin: BrokerAdminApi, slots: asyncio.Semaphore) -> None:
        self.wrapped = admin
        self._slots = slots

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.wrapped, name)
        if name == "close" or not inspect.iscoroutinefunction(attr):
            return attr

        @functools.wraps(attr)
        async def call(*args: Any, **kwargs: Any) -> Any:
            async with self._slots:
                return await attr(*args, **kwargs)

        return call


@dataclass
class BrokerPool:
    connect: Connect
    idle_s: float = 600.0
    clock: Callable[[], float] = time.monotonic
    call_limit: int = 8
    _admins: dict[tuple[str, str | None], tuple[BrokerAdminApi, float]] = field(
        default_factory=dict
    )
    _slots: dict[str, asyncio.Semaphore] = field(default_factory=dict)

    def admin(self, endpoint: str, token: str | None) -> BrokerAdminApi:
        """The (reused) admin API of ``endpoint``, at most ``call_limit`` calls at a time."""
        key = (endpoint, token)
        now = self.clock()
        entry = self._admins.get(key)
        if entry is None:
            slots = self._slots.setdefault(endpoint, asyncio.Semaphore(self.call_limit))
            admin = cast(BrokerAdminApi, Limited(self.connect(endpoint, token), slots))
        else:
            admin = entry[0]
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
                if not any(k[0] == key[0] for k in self._admins):
                    self._slots.pop(key[0], None)
                await admin.close()

    async def close(self) -> None:
        admins, self._admins, self._slots = list(self._admins.values()), {}, {}
        for admin, _ in admins:
            await admin.close()
