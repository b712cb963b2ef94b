"""What sits around the v2 endpoint: auth, TLS, metrics (``--credentials-file``,
``--tls-cert/--tls-key``, ``--metrics-listen``).

:class:`EdgeOptions` is what :meth:`popbroker.grpc.server.PopackEndpoint.start`
takes: the interceptors in order (counting outermost, so refusals are counted;
then the auth guard) and the server credentials. The role process's metrics
registry and ``/metrics`` server are the roles' (:mod:`popbroker.roles.running`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from popbroker.auth.accounts import Accounts
from popbroker.grpc.authguard import AuthGuard
from popbroker.grpc.front import FrontBatching
from popbroker.grpc.observing import CallCounter
from popbroker.metrics.popack import PopackMetrics


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
        # First: the front end's batched receive runs the rest of the chain as a
        # ReceiveMessage, so it is counted and guarded as one (popbroker.grpc.front).
        chain: list[Any] = [FrontBatching()]
        if self.metrics is not None:
            chain.append(CallCounter(self.metrics))
        if self.accounts is not None:
            chain.append(AuthGuard(self.accounts))
        return chain
