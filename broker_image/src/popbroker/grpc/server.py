"""Serving the v2 endpoint: :class:`PopackEndpoint`.

The popack services behind a ``grpc.aio`` server on ``HOST:PORT`` (port 0
picks a free one; :attr:`PopackEndpoint.port`), with ``grpc.health.v1``
(SERVING while it serves, :mod:`popbroker.health`) for kubelet probes.
:class:`~popbroker.grpc.edge.EdgeOptions` adds client auth (``AuthGuard``), TLS
and call counting. The roles that run it (``popack``, ``all``) are composed in
:mod:`popbroker.roles`.

``stop``: health NOT_SERVING, stop accepting calls and give running ones
``grace_s`` (parked receives are answered, not dropped), then stop the services
(which drains the checkpoint buffer).
"""

from __future__ import annotations

import asyncio
import logging

import grpc

from popbroker.grpc import frontframes
from popbroker.grpc.edge import EdgeOptions
from popbroker.grpc.protocol import add_servicer_to_server
from popbroker.grpc.servicer import MessagingServicer
from popbroker.health import Health
from popbroker.services.popack import PopackServices
from popbroker.services.routing import Endpoint
from popbroker.services.settings import Clock, PopackSettings, wall_clock_ms
from popbroker.store.api import StoreApi
from popbroker.store.wire.frames import FrameServer

log = logging.getLogger(__name__)

MIB = 1024 * 1024
HEALTH_SERVICE_NAME = "apache.rocketmq.v2.MessagingService"


def unix_path(target: str) -> str:
    """The file of a gRPC ``unix:PATH`` or ``unix:///PATH`` target."""
    path = target[len("unix:") :]
    return "/" + path.lstrip("/") if path.startswith("//") else path


class PopackEndpoint:
    """The popack services served over gRPC."""

    def __init__(
        self,
        services: PopackServices,
        *,
        server: grpc.aio.Server,
        port: int,
        advertised: Endpoint,
        health: Health,
        framed: FrameServer | None = None,
    ) -> None:
        self.services = services
        self.framed = framed
        self.server = server
        self.port = port
        self.advertised = advertised
        self._health = health

    async def set_serving(self, serving: bool) -> None:
        """``grpc.health.v1`` status of the endpoint (kubelet gRPC probes ask it)."""
        await self._health.set_serving(serving)

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
        interceptors = edge.interceptors()  # one chain for gRPC and the frames alike
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", base.max_body_bytes + 16 * MIB),
                ("grpc.max_send_message_length", -1),
                ("grpc.so_reuseport", 0),
            ],
            interceptors=interceptors,
        )
        if edge.tls is None:
            port = server.add_insecure_port(listen)
        else:
            port = server.add_secure_port(listen, edge.tls.server_credentials())
        if port == 0:
            raise OSError(f"v2 endpoint: cannot bind {listen}")
        if listen.startswith("unix:"):  # behind popfront: routes name the front end's port
            if not advertise:
                raise ValueError(f"--listen {listen}: a Unix socket needs --advertise HOST:PORT")
            host = listen
        else:
            host = Endpoint.parse(listen).host
        advertised = Endpoint.parse(advertise) if advertise else Endpoint(host, port)
        services = await PopackServices.open(
            store, advertised=advertised, settings=base, clock=clock
        )
        if edge.metrics is not None:
            edge.metrics.attach(services)
        servicer = MessagingServicer(services, advertised=advertised)
        add_servicer_to_server(servicer, server)
        health = Health(HEALTH_SERVICE_NAME)
        health.add_to(server)
        services.start()
        await server.start()
        framed = None
        if listen.startswith("unix:"):  # popfront's hot calls, framed (grpc.frontframes)
            framed = await frontframes.serve(servicer, interceptors, unix_path(listen))
        endpoint = cls(
            services,
            server=server,
            port=port,
            advertised=advertised,
            health=health,
            framed=framed,
        )
        await endpoint.set_serving(True)
        log.info(
            "popack serving the v2 MessagingService on %s (advertised %s, tls %s, auth %s)",
            listen,
            advertised,
            "on" if edge.tls else "off",
            "on" if edge.accounts else "off (anonymous clients)",
        )
        return endpoint

    async def stop(self, *, grace_s: float = 2.0) -> None:
        """Stop serving (running calls get ``grace_s``), then drain the services."""
        await self.set_serving(False)
        if self.framed is not None:
            await asyncio.gather(self.server.stop(grace_s), self.framed.close(grace_s))
        else:
            await self.server.stop(grace_s)
        await self.services.stop()
