"""``grpc.health.v1`` for the broker's gRPC servers (kubelet gRPC probes ask it).

One :class:`Health` per server: :meth:`Health.add_to` registers the standard
health service on it, :meth:`Health.set_serving` turns SERVING / NOT_SERVING
for the overall status (``""``) and the server's own service name together.

Callers: the v2 endpoint (:class:`popbroker.grpc.server.PopackEndpoint`) and the
admin API (:class:`popbroker.admin.server.AdminServer`). Below both, so neither
imports the other.
"""

from __future__ import annotations

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc


class Health:
    """The health servicer of one gRPC server, reporting ``""`` and ``service_name``."""

    def __init__(self, service_name: str) -> None:
        self.service_name = service_name
        self._servicer = health.aio.HealthServicer()

    def add_to(self, server: grpc.aio.Server) -> None:
        health_pb2_grpc.add_HealthServicer_to_server(self._servicer, server)

    async def set_serving(self, serving: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ("", self.service_name):
            await self._servicer.set(name, status)
