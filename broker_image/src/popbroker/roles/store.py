"""The ``store`` role: a ``LocalStore`` behind the store wire API, plus the admin API.

    popbroker store --data-dir DIR --socket PATH [--listen HOST:PORT]
                    [--admin-listen HOST:PORT] [--admin-token-file PATH] [--admin-port-file PATH]
                    [--metrics-listen HOST:PORT [--metrics-port-file PATH]]
                    [--settings-json JSON] [--cluster NAME] [--broker-name NAME]
                    [--flush-mode sync|async] [--flush-interval-ms MS] [--segment-bytes N]
                    [--grace-s S] [--repair] [--log-level LEVEL]

    python -m popbroker.roles.store ...   (the same, without the console script)

In a broker pod the store container owns the data volume, so it is the one that
answers the operator's and the audits' admin calls (DESIGN §3): the admin server
runs in the store process, beside the wire server the popack and revive roles
use. The admin server's health (grpc.health.v1) is what the pod's readiness
probe asks. ``--metrics-listen`` serves the store's Prometheus metrics
(``popfleet_store_flush_seconds``, ``popfleet_store_config_write_seconds``,
:mod:`popbroker.metrics.store`) and, with
the admin API on, its call counts (``popfleet_admin_requests_total``,
:mod:`popbroker.metrics.admin`). Without
``--admin-listen`` and ``--metrics-listen`` it is the bare store role the
cross-process contract suite and the store benchmarks start
(``python -m popbroker.roles.store``). Readiness of the wire API is the store
answering ``Info`` (``RemoteStore.wait_ready``), not a line on stdout.

Shutdown, in order: the admin API and the metrics endpoint; stop accepting wire
calls and give running ones ``--grace-s``; close the store (final flush,
checkpoint, lock released). Exit status 0 after a clean stop, 2 when the store
cannot be opened or the socket cannot be bound.

Lives here, not in ``popbroker.store``: the store never imports the admin server.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from prometheus_client import CollectorRegistry

from popbroker.admin import server as admin_server
from popbroker.admin.servicer import AdminStore
from popbroker.metrics import exposition
from popbroker.metrics.admin import AdminMetrics
from popbroker.metrics.consumers import ConsumerLagMetrics, observe_volume
from popbroker.metrics.replication import observe_replication
from popbroker.metrics.store import observe_config_writes, observe_flushes
from popbroker.replicator.replication_role import ReplicationOptions, replicated
from popbroker.roles import running
from popbroker.store import errors
from popbroker.store.api import FlushMode
from popbroker.store.local import LocalStore
from popbroker.store.settings import StoreSettings
from popbroker.store.wire import server

log = logging.getLogger(__name__)

# the open store, and what the store wire serves (the store, or its replica: the admin API
# writes through it, so a follower refuses admin writes as it refuses popack's)
Companions = Callable[[LocalStore, AdminStore], Awaitable[Callable[[], Awaitable[None]]]]


@dataclass(frozen=True, slots=True)
class Companion:
    """A server beside the store: where it listens (None: off) and where its port is written."""

    listen: str | None
    port_file: Path | None


def _companions(admin: Companion, token: str | None, metrics: Companion) -> Companions | None:
    """Start the admin API and the metrics endpoint on the open store (either may be off)."""
    if not admin.listen and not metrics.listen:
        return None
    if metrics.listen:
        exposition.split_host_port(metrics.listen)  # a bad value fails before the store opens

    async def start(store: LocalStore, served: AdminStore) -> Callable[[], Awaitable[None]]:
        stops: list[Callable[[], Awaitable[None]]] = []
        admin_metrics = None
        if metrics.listen:
            registry = CollectorRegistry()
            observe_flushes(store.flusher, registry)
            observe_config_writes(store, registry)
            observe_volume(store.data_dir, registry)
            figures = getattr(served, "replication_figures", None)  # a replica's store
            if figures is not None:
                observe_replication(figures, registry)
            lag = ConsumerLagMetrics(
                registry, served, serving=lambda: figures is None or figures().leading
            )
            admin_metrics = AdminMetrics(registry) if admin.listen else None
            metrics_server = await exposition.serve_metrics(
                metrics.listen, registry, refreshers=[lag.refresh]
            )
            running.write_port(metrics.port_file, metrics_server.port)
            stops.append(metrics_server.stop)
        if admin.listen:
            admin_api = await admin_server.serve_admin(
                served, listen=admin.listen, token=token, metrics=admin_metrics
            )
            running.write_port(admin.port_file, admin_api.port)
            stops.append(admin_api.stop)

        async def stop_all() -> None:
            for stop in reversed(stops):
                await stop()

        return stop_all

    return start


async def run(
    data_dir: Path,
    settings: StoreSettings,
    *,
    socket_path: Path | None,
    listen: str | None,
    grace_s: float = 2.0,
    repair: bool = False,
    on_open: Companions | None = None,
    replication: ReplicationOptions | None = None,
) -> None:
    """Open the store, serve it until a termination signal, then stop in order.

    ``on_open`` starts the companion servers on the open store (the admin API,
    ``/metrics``) and returns their stop function, called first at shutdown.
    """
    store = LocalStore.open(data_dir, settings, repair=repair)
    try:
        async with replicated(store, replication) as served:
            grpc_server = await server.serve(served, socket_path=socket_path, listen=listen)
            stop_companion = (
                await on_open(store, cast(AdminStore, served)) if on_open is not None else None
            )
            running.freeze_startup_objects()
            stop = running.stop_on_signals()
            await stop.wait()
            log.info("store wire: stopping")
            if stop_companion is not None:
                await stop_companion()
            await grpc_server.stop(grace_s)
    finally:
        await store.close()


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="popbroker store")
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--socket", type=Path, help="Unix socket path to serve on")
    parser.add_argument(
        "--listen", help="HOST:PORT to serve on (the pod IP, never a fixed localhost port)"
    )
    parser.add_argument(
        "--settings-json",
        default="{}",
        help="StoreSettings fields as a JSON object (enums by value); flags below win",
    )
    parser.add_argument("--cluster")
    parser.add_argument("--broker-name")
    parser.add_argument("--flush-mode", choices=[m.value for m in FlushMode])
    parser.add_argument("--flush-interval-ms", type=int)
    parser.add_argument("--segment-bytes", type=int)
    parser.add_argument("--grace-s", type=float, default=2.0)
    parser.add_argument(
        "--repair",
        action="store_true",
        help="truncate the commit log at damaged durable data instead of refusing to start "
        "(records after the damage are lost; see docs/operations.md)",
    )
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--admin-listen", help="HOST:PORT of the admin API (none: no admin API)")
    parser.add_argument(
        "--admin-token-file",
        type=Path,
        help="the admin token (else $POPFLEET_ADMIN_TOKEN; neither: no token)",
    )
    parser.add_argument("--admin-port-file", type=Path, help="write the admin port here")
    ReplicationOptions.add_flags(parser)
    running.add_metrics_flags(parser)
    return parser


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    the_parser = parser()
    args = the_parser.parse_args(argv)
    if args.socket is None and args.listen is None:
        the_parser.error("give --socket, --listen or both")
    return args


def settings_to_json(settings: StoreSettings) -> str:
    """The ``--settings-json`` value that reproduces ``settings`` in the store process."""
    fields = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}
    fields["flush_mode"] = settings.flush_mode.value
    return json.dumps(fields, sort_keys=True)


def settings_from(args: argparse.Namespace) -> StoreSettings:
    """``--settings-json`` over the defaults, then the individual flags over that."""
    overrides = json.loads(args.settings_json)
    if not isinstance(overrides, dict):
        raise ValueError("--settings-json must be a JSON object")
    for flag in ("cluster", "broker_name", "flush_mode", "flush_interval_ms", "segment_bytes"):
        value = getattr(args, flag)
        if value is not None:
            overrides[flag] = value
    if "flush_mode" in overrides:
        overrides["flush_mode"] = FlushMode(overrides["flush_mode"])
    try:
        return StoreSettings(**overrides)
    except TypeError as exc:  # an unknown field name
        raise ValueError(f"bad store settings: {exc}") from exc


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the store role until stopped."""
    args = parse_args(argv)
    running.configure_logging(args.log_level, separator=":")
    try:
        token = admin_server.load_token(args.admin_token_file) if args.admin_listen else None
        on_open = _companions(
            Companion(args.admin_listen, args.admin_port_file),
            token,
            Companion(args.metrics_listen, args.metrics_port_file),
        )
        asyncio.run(
            run(
                args.data_dir,
                settings_from(args),
                socket_path=args.socket,
                listen=args.listen,
                grace_s=args.grace_s,
                repair=args.repair,
                on_open=on_open,
                replication=ReplicationOptions.from_args(args),
            )
        )
    except (errors.StoreError, OSError, ValueError, RuntimeError) as exc:
        print(f"popbroker store: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
