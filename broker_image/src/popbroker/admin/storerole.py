"""``popbroker store``: the store wire API plus the admin API on the same open store.

    popbroker store --data-dir DIR --socket PATH [--listen HOST:PORT]
                    [--admin-listen HOST:PORT] [--admin-token-file PATH] [--admin-port-file PATH]
                    [--metrics-listen HOST:PORT [--metrics-port-file PATH]] ...

In a broker pod the store container owns the data volume, so it is the one that
answers the operator's and the audits' admin calls (DESIGN §3): the admin server
runs in the store process, beside the wire server the popack and revive roles
use. Without ``--admin-listen`` this is exactly ``serve_main``. The admin
server's health (grpc.health.v1) is what the pod's readiness probe asks.
``--metrics-listen`` serves the store's Prometheus metrics
(``popfleet_store_flush_seconds``, :mod:`popbroker.metrics.store`).

Lives here, not in ``popbroker.store``: the store never imports the admin server.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry

from popbroker.admin import server as admin_server
from popbroker.metrics import exposition
from popbroker.metrics.store import observe_flushes
from popbroker.store import errors
from popbroker.store.api import StoreApi
from popbroker.store.wire import serve_main


def _write_port(path: Path | None, port: int) -> None:
    if path is not None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(f"{port}\n")
        os.replace(tmp, path)


@dataclass(frozen=True, slots=True)
class Companion:
    """A server beside the store: where it listens (None: off) and where its port is written."""

    listen: str | None
    port_file: Path | None


def _companions(
    admin: Companion, token: str | None, metrics: Companion
) -> Callable[[StoreApi], Awaitable[Callable[[], Awaitable[None]]]] | None:
    """Start the admin API and the metrics endpoint on the open store (either may be off)."""
    if not admin.listen and not metrics.listen:
        return None
    if metrics.listen:
        exposition.split_host_port(metrics.listen)  # a bad value fails before the store opens

    async def start(store: StoreApi) -> Callable[[], Awaitable[None]]:
        stops: list[Callable[[], Awaitable[None]]] = []
        if metrics.listen:
            registry = CollectorRegistry()
            observe_flushes(store, registry)
            metrics_server = await exposition.serve_metrics(metrics.listen, registry)
            _write_port(metrics.port_file, metrics_server.port)
            stops.append(metrics_server.stop)
        if admin.listen:
            admin_api = await admin_server.serve_admin(store, listen=admin.listen, token=token)
            _write_port(admin.port_file, admin_api.port)
            stops.append(admin_api.stop)

        async def stop_all() -> None:
            for stop in reversed(stops):
                await stop()

        return stop_all

    return start


def main(argv: Sequence[str] | None = None) -> int:
    parser = serve_main.build_parser(prog="popbroker store")
    parser.add_argument("--admin-listen", help="HOST:PORT of the admin API (none: no admin API)")
    parser.add_argument(
        "--admin-token-file",
        type=Path,
        help="the admin token (else $POPFLEET_ADMIN_TOKEN; neither: no token)",
    )
    parser.add_argument("--admin-port-file", type=Path, help="write the admin port here")
    parser.add_argument("--metrics-listen", help="HOST:PORT of the Prometheus /metrics endpoint")
    parser.add_argument("--metrics-port-file", type=Path, help="write the metrics port here")
    args = serve_main.parse_args(argv, parser)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        token = admin_server.load_token(args.admin_token_file) if args.admin_listen else None
        on_open = _companions(
            Companion(args.admin_listen, args.admin_port_file),
            token,
            Companion(args.metrics_listen, args.metrics_port_file),
        )
        asyncio.run(
            serve_main.run(
                args.data_dir,
                serve_main.settings_from(args),
                socket_path=args.socket,
                listen=args.listen,
                grace_s=args.grace_s,
                repair=args.repair,
                on_open=on_open,
            )
        )
    except (errors.StoreError, OSError, ValueError, RuntimeError) as exc:
        print(f"popbroker store: {exc}", file=sys.stderr)
        return 2
    return 0
