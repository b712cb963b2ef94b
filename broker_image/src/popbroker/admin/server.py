"""``serve_admin``: the admin API on its own port, with a token check and health.

    server = await serve_admin(store, listen="POD_IP:9877", token=token)
    ...
    await server.stop(grace_s=2.0)

* **Port**: its own ``HOST:PORT`` (port 0 picks a free one; ``server.port``),
  never the RocketMQ client port, so a NetworkPolicy can open one and not the
  other.
* **Token**: when ``token`` is set, every ``BrokerAdmin`` call must carry
  ``authorization: Bearer <token>``; anything else ends with UNAUTHENTICATED
  (reason ``TOKEN_REQUIRED`` or ``TOKEN_REFUSED``) before the servicer runs.
  The comparison is constant-time. ``grpc.health.v1.Health`` needs no token:
  kubelet gRPC probes carry none, and health reveals nothing.
* **Health**: SERVING for ``""`` and ``popfleet.admin.v1.BrokerAdmin`` once
  started; ``set_serving(False)`` (and ``stop``) turn it NOT_SERVING.
* **Metrics**: with ``metrics`` every answered call is counted in
  ``popfleet_admin_requests_total{method,code}`` (:mod:`popbroker.metrics.admin`).
* **Pop state**: ``pop_state`` is the services' live
  :class:`~popbroker.inspect.popstate.PopStateProvider`; without it the server
  uses :class:`~popbroker.inspect.popstate.StorePopState`.
"""

from __future__ import annotations

import hmac
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import grpc

from popbroker.admin.errors import REASON_METADATA_KEY
from popbroker.admin.servicer import AdminServicer, AdminStore
from popbroker.health import Health
from popbroker.inspect.popstate import PopStateProvider, StorePopState
from popbroker.metrics.admin import AdminMetrics
from popfleet_api.admin.v1 import admin_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

SERVICE_NAME = "popfleet.admin.v1.BrokerAdmin"
TOKEN_ENV = "POPFLEET_ADMIN_TOKEN"  # noqa: S105 -- the variable's name, not a secret
HEALTH_METHOD_PREFIX = "/grpc.health.v1.Health/"
SERVER_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.max_receive_message_length", 4 * 1024 * 1024),
    ("grpc.so_reuseport", 0),
)


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def load_token(
    token_file: Path | None = None, *, environ: Mapping[str, str] = os.environ
) -> str | None:
    """The admin token: a file's stripped content (a Secret), else ``$POPFLEET_ADMIN_TOKEN``.

    None (no token required) when neither is set; an empty or unreadable file is an error,
    never a silently open admin port.
    """
    if token_file is not None:
        token = token_file.read_text(encoding="utf-8").strip()
        if not token:
            raise ValueError(f"admin token file {token_file} is empty")
        return token
    return environ.get(TOKEN_ENV) or None


class TokenInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuse admin calls without ``authorization: Bearer <token>`` (health is exempt)."""

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("an empty token would let everyone in")
        self._expected = f"Bearer {token}".encode()

    async def intercept_service(
        self,
        continuation: Callable[[Any], Awaitable[Any]],
        handler_call_details: Any,
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None or handler_call_details.method.startswith(HEALTH_METHOD_PREFIX):
            return handler
        presented = None
        for key, value in handler_call_details.invocation_metadata or ():
            if key == "authorization":
                presented = value.encode() if isinstance(value, str) else bytes(value)
        if presented is not None and hmac.compare_digest(presented, self._expected):
            return handler
        if presented is None:
            return _refusing(handler, "TOKEN_REQUIRED", "this broker requires a bearer token")
        return _refusing(handler, "TOKEN_REFUSED", "the bearer token was refused")


def _refusing(handler: Any, reason: str, message: str) -> Any:
    async def deny(request: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(
            grpc.StatusCode.UNAUTHENTICATED,
            message,
            trailing_metadata=((REASON_METADATA_KEY, reason),),
        )

    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(
            deny,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
    return grpc.unary_unary_rpc_method_handler(
        deny,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


class AdminServer:
    """A started admin server: its port, its health, and ``stop``."""

    def __init__(self, server: grpc.aio.Server, port: int, health: Health) -> None:
        self.server = server
        self.port = port
        self._health = health

    async def set_serving(self, serving: bool) -> None:
        await self._health.set_serving(serving)

    async def stop(self, grace_s: float | None = 2.0) -> None:
        await self.set_serving(False)
        await self.server.stop(grace_s)


async def serve_admin(
    store: AdminStore,
    *,
    listen: str,
    token: str | None = None,
    pop_state: PopStateProvider | None = None,
    client_endpoint: str | None = None,
    ready: Callable[[], bool] | None = None,
    clock: Callable[[], int] = wall_clock_ms,
    metrics: AdminMetrics | None = None,
) -> AdminServer:
    """Start the admin API on ``listen`` (``HOST:PORT``); see the module docstring.

    ``client_endpoint`` is what ``GetBrokerInfo`` reports as the broker's client
    endpoint (default: this broker's entry in the member list); ``ready`` an
    extra readiness check on top of "the store is writable".
    """
    interceptors = [TokenInterceptor(token)] if token else []
    server = grpc.aio.server(options=SERVER_OPTIONS, interceptors=interceptors)
    servicer = AdminServicer(
        store,
        pop_state=pop_state or StorePopState(store, clock=clock),
        clock=clock,
        client_endpoint=client_endpoint,
        ready=ready,
        metrics=metrics,
    )
    pb_grpc.add_BrokerAdminServicer_to_server(servicer, server)
    health = Health(SERVICE_NAME)
    health.add_to(server)
    try:
        port = server.add_insecure_port(listen)
        if port == 0:
            raise OSError(f"admin API: cannot bind {listen}")
        await server.start()
    except BaseException:
        await server.stop(None)
        raise
    admin = AdminServer(server, port, health)
    await admin.set_serving(True)
    log.info("admin API: serving on %s (port %d, token %s)", listen, port, "on" if token else "off")
    return admin
