"""Serving the v2 endpoint, and the three roles' lifecycles.

  * :class:`PopackEndpoint` — the popack services behind a ``grpc.aio`` server
    on ``HOST:PORT`` (port 0 picks a free one; :attr:`PopackEndpoint.port`),
    with ``grpc.health.v1`` (SERVING while it serves) for kubelet probes.
  * :func:`run_popack`, :func:`run_revive`, :func:`run_all` — what the CLI
    roles run until SIGTERM/SIGINT: ``popack`` and ``revive`` against a store
    role on a Unix socket, ``all`` with an in-process ``LocalStore`` and, with
    ``--admin-listen``, the admin API (``popbroker.admin``) reporting the live
    revive ledgers and checkpoint buffer (:class:`LivePopState`).
  * :class:`~popbroker.grpc.edge.EdgeOptions` — client auth (``AuthGuard``),
    TLS, and call counting on the v2 endpoint; ``RoleMetrics`` — the role's
    ``/metrics`` endpoint (see :mod:`popbroker.metrics`).

Shutdown, in order: stop accepting calls and give running ones ``grace_s``
(parked receives are answered, not dropped); drain the checkpoint buffer;
stop revive; close the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from popbroker.admin import popstate as admin_popstate
from popbroker.admin import server as admin_server
from popbroker.grpc.edge import EdgeOptions, RoleMetrics
from popbroker.grpc.protocol import add_servicer_to_server
from popbroker.grpc.servicer import MessagingServicer
from popbroker.pop.checkpointbuffer import BufferStats
from popbroker.pop.checkpoints import QueueKey
from popbroker.pop.reviving import LedgerStats
from popbroker.services.configcache import ConfigCache
from popbroker.services.popack import PopackServices
from popbroker.services.reviving import ReviveService
from popbroker.services.routing import Endpoint
from popbroker.services.settings import (
    Clock,
    PopackSettings,
    ReviveRoleSettings,
    wall_clock_ms,
)
from popbroker.store.api import StoreApi
from popbroker.store.local import LocalStore
from popbroker.store.settings import StoreSettings
from popbroker.store.wire.client import RemoteStore

log = logging.getLogger(__name__)

MIB = 1024 * 1024
HEALTH_SERVICE_NAME = "apache.rocketmq.v2.MessagingService"
STORE_READY_TIMEOUT_S = 60.0


class PopackEndpoint:
    """The popack services served over gRPC."""

    def __init__(
        self,
        services: PopackServices,
        server: grpc.aio.Server,
        port: int,
        advertised: Endpoint,
        health_servicer: health.aio.HealthServicer,
    ) -> None:
        self.services = services
        self.server = server
        self.port = port
        self.advertised = advertised
        self._health = health_servicer

    async def set_serving(self, serving: bool) -> None:
        """``grpc.health.v1`` status of the endpoint (kubelet gRPC probes ask it)."""
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ("", HEALTH_SERVICE_NAME):
            await self._health.set(name, status)

    @classmethod
    async def start(
        cls,
        store: StoreApi,
        *,
        listen: str,
        advertise: str | None = None,
        settings: PopackSettings | None = None,
        clock: Clock = wall_clock_ms,
        edge: EdgeOptions | None = None,
    ) -> PopackEndpoint:
        """Bind ``listen``, start the services and the server."""
        base = settings or PopackSettings()
        edge = edge or EdgeOptions()
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", base.max_body_bytes + 16 * MIB),
                ("grpc.max_send_message_length", -1),
                ("grpc.so_reuseport", 0),
            ],
            interceptors=edge.interceptors(),
        )
        if edge.tls is None:
            port = server.add_insecure_port(listen)
        else:
            port = server.add_secure_port(listen, edge.tls.server_credentials())
        if port == 0:
            raise OSError(f"v2 endpoint: cannot bind {listen}")
        host = Endpoint.parse(listen).host
        advertised = Endpoint.parse(advertise) if advertise else Endpoint(host, port)
        services = await PopackServices.open(
            store, advertised=advertised, settings=base, clock=clock
        )
        if edge.metrics is not None:
            edge.metrics.attach(services)
        add_servicer_to_server(MessagingServicer(services, advertised=advertised), server)
        health_servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        services.start()
        await server.start()
        endpoint = cls(services, server, port, advertised, health_servicer)
        await endpoint.set_serving(True)
        log.info(
            "popack serving apache.rocketmq.v2.MessagingService on %s:%d (tls %s, auth %s)",
            host,
            port,
            "on" if edge.tls else "off",
            "on" if edge.accounts else "off (anonymous clients)",
        )
        return endpoint

    async def stop(self, *, grace_s: float = 2.0) -> None:
        """Stop serving (running calls get ``grace_s``), then drain the services."""
        await self.set_serving(False)
        await self.server.stop(grace_s)
        await self.services.stop()


@dataclass
class ReviveRole:
    """The revive service and its task."""

    service: ReviveService
    task: asyncio.Task[None]
    stop_event: asyncio.Event

    @classmethod
    async def start(
        cls,
        store: StoreApi,
        *,
        settings: ReviveRoleSettings | None = None,
        clock: Clock = wall_clock_ms,
    ) -> ReviveRole:
        info = await store.info()
        base = settings or ReviveRoleSettings()
        resolved = ReviveRoleSettings(
            cluster=info.cluster,
            broker_name=info.broker_name,
            scan_batch=base.scan_batch,
            idle_tick_ms=base.idle_tick_ms,
            max_tasks_per_round=base.max_tasks_per_round,
            ledger=base.ledger,
        )
        service = ReviveService(
            store=store,
            settings=resolved,
            clock=clock,
            config=ConfigCache(store, clock=clock),
        )
        await service.open()
        stop_event = asyncio.Event()
        task = asyncio.create_task(service.run(stop_event), name="revive")
        return cls(service, task, stop_event)

    async def stop(self) -> None:
        self.stop_event.set()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


def _stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    return stop


async def _remote_store(store_socket: Path) -> RemoteStore:
    store = RemoteStore.connect(f"unix:{store_socket}")
    await store.wait_ready(timeout_s=STORE_READY_TIMEOUT_S)
    return store


async def run_popack(
    *,
    store_socket: Path,
    listen: str,
    advertise: str | None,
    on_bound: Callable[[int], None] = lambda port: None,
    settings: PopackSettings | None = None,
    edge: EdgeOptions | None = None,
    metrics: RoleMetrics | None = None,
) -> None:
    """The popack role: the v2 endpoint in front of a store role."""
    stop = _stop_on_signals()
    edge = edge or EdgeOptions()
    store = await _remote_store(store_socket)
    try:
        if metrics is not None:
            edge.metrics = metrics.for_popack()
        endpoint = await PopackEndpoint.start(
            store, listen=listen, advertise=advertise, settings=settings, edge=edge
        )
        if metrics is not None:
            await metrics.start()
        on_bound(endpoint.port)
        await stop.wait()
        await endpoint.stop()
    finally:
        if metrics is not None:
            await metrics.stop()
        await store.close()


async def run_revive(*, store_socket: Path, metrics: RoleMetrics | None = None) -> None:
    """The revive role: revive loops against a store role."""
    stop = _stop_on_signals()
    store = await _remote_store(store_socket)
    try:
        role = await ReviveRole.start(store)
        if metrics is not None:
            metrics.for_revive().attach(store, role.service)
            await metrics.start()
        await stop.wait()
        await role.stop()
    finally:
        if metrics is not None:
            await metrics.stop()
        await store.close()


class LivePopState:
    """The admin API's ``PopStateProvider`` when popack and revive share the process.

    Revive-ledger and checkpoint-buffer statistics are read live from the roles;
    in-flight counts come from the store's revive log (``StorePopState``), which
    already knows every durable checkpoint.
    """

    def __init__(
        self,
        store_state: admin_popstate.StorePopState,
        popack: PopackServices,
        revive: ReviveService,
    ) -> None:
        self._store_state = store_state
        self._popack = popack
        self._revive = revive

    async def in_flight(self, queues: Sequence[QueueKey]) -> Mapping[QueueKey, int]:
        return await self._store_state.in_flight(queues)

    async def revive_ledgers(self) -> Mapping[int, LedgerStats]:
        return {w.revive_queue_id: w.ledger.stats() for w in self._revive.workers}

    async def checkpoint_buffer(self) -> BufferStats | None:
        return self._popack.state.buffer.stats()


async def run_all(
    *,
    data_dir: Path,
    store_settings: StoreSettings,
    listen: str,
    advertise: str | None,
    admin_listen: str | None = None,
    admin_token: str | None = None,
    on_bound: Callable[[int], None] = lambda port: None,
    on_admin_bound: Callable[[int], None] = lambda port: None,
    settings: PopackSettings | None = None,
    edge: EdgeOptions | None = None,
    metrics: RoleMetrics | None = None,
) -> None:
    """All three roles in one process on an in-process ``LocalStore`` (+ the admin API)."""
    stop = _stop_on_signals()
    edge = edge or EdgeOptions()
    store = LocalStore.open(data_dir, store_settings)
    try:
        if metrics is not None:
            metrics.for_store(store)
            edge.metrics = metrics.for_popack()
        endpoint = await PopackEndpoint.start(
            store, listen=listen, advertise=advertise, settings=settings, edge=edge
        )
        revive = await ReviveRole.start(store)
        if metrics is not None:
            metrics.for_revive().attach(store, revive.service)
            await metrics.start()
        admin = None
        if admin_listen is not None:
            pop_state = LivePopState(
                admin_popstate.StorePopState(store, clock=wall_clock_ms),
                endpoint.services,
                revive.service,
            )
            admin = await admin_server.serve_admin(
                store,
                listen=admin_listen,
                token=admin_token,
                pop_state=pop_state,
                client_endpoint=str(endpoint.advertised),
            )
            on_admin_bound(admin.port)
        on_bound(endpoint.port)
        await stop.wait()
        if admin is not None:
            await admin.stop()
        await endpoint.stop()
        await revive.stop()
    finally:
        if metrics is not None:
            await metrics.stop()
        await store.close()
