"""What sits around the v2 endpoint: auth, TLS, metrics (``--credentials-file``,
``--tls-cert/--tls-key``, ``--metrics-listen``).

:class:`EdgeOptions` is what :meth:`popbroker.grpc.server.PopackEndpoint.start`
takes: the interceptors in order (counting outermost, so refusals are counted;
then the auth guard) and the server credentials. :class:`RoleMetrics` is one
role process's registry, the per-role metric sets it holds, and the
``/metrics`` server.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from prometheus_client import CollectorRegistry

from popbroker.auth.accounts import Accounts
from popbroker.grpc.authguard import AuthGuard
from popbroker.grpc.observing import CallCounter
from popbroker.metrics import exposition
from popbroker.metrics.popack import PopackMetrics
from popbroker.metrics.revive import ReviveMetrics
from popbroker.metrics.store import observe_flushes


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """The server certificate chain and private key (PEM), read when the role starts."""

    cert: bytes
    key: bytes

    @classmethod
    def load(cls, cert_path: Path, key_path: Path) -> TlsFiles:
        cert, key = cert_path.read_bytes(), key_path.read_bytes()
        if b"-----BEGIN" not in cert:
            raise ValueError(f"--tls-cert {cert_path}: not a PEM certificate")
        if b"-----BEGIN" not in key or b"PRIVATE KEY" not in key:
            raise ValueError(f"--tls-key {key_path}: not a PEM private key")
        return cls(cert, key)

    def server_credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials([(self.key, self.cert)])


@dataclass
class EdgeOptions:
    """Auth, TLS and call counting of a v2 endpoint (all off by default)."""

    accounts: Accounts | None = None
    tls: TlsFiles | None = None
    metrics: PopackMetrics | None = None

    def interceptors(self) -> list[Any]:
        chain: list[Any] = []
        if self.metrics is not None:
            chain.append(CallCounter(self.metrics))
        if self.accounts is not None:
            chain.append(AuthGuard(self.accounts))
        return chain


@dataclass
class RoleMetrics:
    """One process's metrics: a registry, the role sets in it, and the HTTP endpoint."""

    listen: str
    on_bound: Callable[[int], None] = lambda port: None
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    popack: PopackMetrics | None = None
    revive: ReviveMetrics | None = None
    server: exposition.MetricsServer | None = None

    def for_popack(self) -> PopackMetrics:
        self.popack = PopackMetrics(self.registry)
        return self.popack

    def for_revive(self) -> ReviveMetrics:
        self.revive = ReviveMetrics(self.registry)
        return self.revive

    def for_store(self, store: object) -> None:
        observe_flushes(store, self.registry)

    async def start(self) -> None:
        refreshers = [m.refresh for m in (self.popack, self.revive) if m is not None]
        self.server = await exposition.serve_metrics(
            self.listen, self.registry, refreshers=refreshers
        )
        self.on_bound(self.server.port)

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
