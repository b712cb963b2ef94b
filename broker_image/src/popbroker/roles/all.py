"""The ``all`` role: store, popack and revive in one process (``popbroker all``).

    popbroker all --data-dir DIR --listen HOST:PORT [--advertise HOST:PORT] [--port-file PATH]
                  [--admin-listen HOST:PORT] [--admin-token-file PATH] [--admin-port-file PATH]
                  [--cluster NAME] [--broker-name NAME] [--flush-mode sync|async]
                  [--segment-bytes N] [CLIENT-EDGE] [POP-TUNING] [METRICS]

CLIENT-EDGE, POP-TUNING and METRICS as for ``popack`` (:mod:`popbroker.roles.popack`).
The store is an in-process ``LocalStore``; with ``--admin-listen`` the admin API
(:mod:`popbroker.admin`) serves beside the v2 endpoint and reports the live
revive ledgers and checkpoint buffer (:class:`LivePopState`). ``--admin-port-file``
receives the admin port as ``--port-file`` does the client port.

Start, in order: open the store; the v2 endpoint; revive; the metrics endpoint;
the admin API. Stop (SIGTERM/SIGINT), in order: the admin API; the endpoint
(running calls get their grace, the checkpoint buffer drains); revive; the
metrics endpoint; the store. Exit status 0 after a clean stop, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from popbroker.admin import server as admin_server
from popbroker.grpc.edge import EdgeOptions
from popbroker.grpc.server import PopackEndpoint
from popbroker.inspect.popstate import StorePopState
from popbroker.pop.checkpointbuffer import BufferStats
from popbroker.pop.checkpoints import QueueKey
from popbroker.pop.reviving import LedgerStats
from popbroker.roles import popack, running
from popbroker.roles.revive import ReviveRole
from popbroker.services.popack import PopackServices
from popbroker.services.reviving import ReviveService
from popbroker.services.settings import PopackSettings, wall_clock_ms
from popbroker.store.api import FlushMode
from popbroker.store.local import LocalStore
from popbroker.store.settings import StoreSettings


class LivePopState:
    """The admin API's ``PopStateProvider`` when popack and revive share the process.

    Revive-ledger and checkpoint-buffer statistics are read live from the roles;
    in-flight counts come from the store's revive log (``StorePopState``), which
    already knows every durable checkpoint.
    """

    def __init__(
        self,
        store_state: StorePopState,
        *,
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


async def run(
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
    metrics: running.RoleMetrics | None = None,
) -> None:
    """All three roles in one process on an in-process ``LocalStore`` (+ the admin API)."""
    running.freeze_startup_objects()
    stop = running.stop_on_signals()
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
                StorePopState(store, clock=wall_clock_ms),
                popack=endpoint.services,
                revive=revive.service,
            )
            admin = await admin_server.serve_admin(
                store,
                listen=admin_listen,
                token=admin_token,
                pop_state=pop_state,
                client_endpoint=str(endpoint.advertised),
                metrics=metrics.for_admin() if metrics is not None else None,
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


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="popbroker all")
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--admin-listen", help="HOST:PORT of the admin API")
    parser.add_argument(
        "--admin-token-file",
        type=Path,
        help="the admin token (else $POPFLEET_ADMIN_TOKEN; neither: no token)",
    )
    parser.add_argument("--admin-port-file", type=Path, help="write the admin port here")
    parser.add_argument("--cluster", default="popfleet")
    parser.add_argument("--broker-name", default="broker-0")
    parser.add_argument(
        "--flush-mode", choices=[m.value for m in FlushMode], default=FlushMode.ASYNC.value
    )
    parser.add_argument("--segment-bytes", type=int, default=64 * 1024 * 1024)
    popack.add_endpoint_flags(parser)
    running.add_metrics_flags(parser)
    parser.add_argument("--log-level", default="INFO")
    return parser


def main(argv: Sequence[str]) -> int:
    """Parse ``argv`` and run the three roles until stopped."""
    args = parser().parse_args(argv)
    running.configure_logging(args.log_level)
    try:
        metrics = running.role_metrics(args)
        edge = popack.edge_options(args)
        admin_token = admin_server.load_token(args.admin_token_file)
    except (OSError, ValueError) as exc:  # BadCredentialsFile is a ValueError
        print(f"popbroker all: {exc}", file=sys.stderr)
        return 2
    store_settings = StoreSettings(
        cluster=args.cluster,
        broker_name=args.broker_name,
        flush_mode=FlushMode(args.flush_mode),
        segment_bytes=args.segment_bytes,
    )
    asyncio.run(
        run(
            data_dir=args.data_dir,
            store_settings=store_settings,
            listen=args.listen,
            advertise=args.advertise,
            admin_listen=args.admin_listen,
            admin_token=admin_token,
            on_bound=lambda port: running.write_port(args.port_file, port),
            on_admin_bound=lambda port: running.write_port(args.admin_port_file, port),
            settings=popack.popack_settings(args),
            edge=edge,
            metrics=metrics,
        )
    )
    return 0
