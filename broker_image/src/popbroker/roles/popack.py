"""The ``popack`` role: the RocketMQ v2 endpoint in front of a store role (``popbroker popack``).

    popbroker popack --store-socket PATH [--data-dir PATH] --listen HOST:PORT
                     [--advertise HOST:PORT] [--port-file PATH] [CLIENT-EDGE]
                     [POP-TUNING] [METRICS]

``--data-dir``: the store role's data directory, mounted here too (in a broker
pod it is the shared volume): reads then come from its files
(:mod:`popbroker.store.direct`) instead of the store's socket, and only writes
and what a direct read cannot be sure of go over it. Exit status 2 when the
directory holds no store.

    CLIENT-EDGE: [--credentials-file PATH] [--tls-cert PATH --tls-key PATH]
    POP-TUNING:  [--pop-ck-stay-ms MS] [--pop-ck-max-buffer N] [--max-parked-requests N]
    METRICS:     [--metrics-listen HOST:PORT] [--metrics-port-file PATH]

``--credentials-file``: access keys, secrets and per-resource permissions (see
:mod:`popbroker.auth.accounts`); clients must then sign every call
(``UNAUTHORIZED`` / ``FORBIDDEN`` otherwise). Without it clients are anonymous.
``--tls-cert/--tls-key``: PEM server certificate (chain) and key; the client
port then speaks TLS only. ``--metrics-listen``: Prometheus ``/metrics`` of
this role (see :mod:`popbroker.metrics`). POP tuning: how long a checkpoint
stays in popack's memory and how many may stay there (``ck_stay_ms``,
``max_buffered_cks``; the hard bound ``max_tracked_cks`` grows with the latter),
and how many long polls may park.

``--listen`` may use port 0; ``--port-file PATH`` then receives the bound port
(written atomically once the endpoint serves), which is how tests and
supervisors learn it without parsing logs. ``--advertise`` is the endpoint put
into routes (default: the listen host and the bound port). ``--listen
unix:PATH`` serves the compiled front end (``popfront -upstream unix://PATH``,
:mod:`popbroker.grpc.front`), which owns the client port: ``--advertise`` is
then required and names it.

The client-edge and POP-tuning flags are the ``all`` role's too
(:mod:`popbroker.roles.all` adds them with :func:`add_endpoint_flags`).

Runs until SIGTERM/SIGINT: stops the endpoint (see
:class:`~popbroker.grpc.server.PopackEndpoint`), then closes the store. Exit
status 0 after a clean stop, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from popbroker.auth import accounts
from popbroker.grpc.edge import EdgeOptions, TlsFiles
from popbroker.grpc.server import PopackEndpoint
from popbroker.roles import running
from popbroker.services.settings import PopackSettings


async def run(
    *,
    store_socket: Path,
    data_dir: Path | None = None,
    listen: str,
    advertise: str | None,
    on_bound: Callable[[int], None] = lambda port: None,
    settings: PopackSettings | None = None,
    edge: EdgeOptions | None = None,
    metrics: running.RoleMetrics | None = None,
) -> None:
    """The popack role: the v2 endpoint in front of a store role."""
    running.freeze_startup_objects()
    stop = running.stop_on_signals()
    edge = edge or EdgeOptions()
    store = await running.remote_store(store_socket, data_dir=data_dir)
    try:
        if metrics is not None:
            edge.metrics = metrics.for_popack()
            metrics.for_direct_reads(store)
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


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text}: must be a positive integer")
    return value


def add_endpoint_flags(parser: argparse.ArgumentParser) -> None:
    """The v2 endpoint's flags: listen/advertise/port file, CLIENT-EDGE and POP-TUNING."""
    parser.add_argument(
        "--listen",
        required=True,
        help="HOST:PORT for the v2 endpoint, or unix:PATH behind popfront (needs --advertise)",
    )
    parser.add_argument("--advertise", help="HOST:PORT put into routes")
    parser.add_argument("--port-file", type=Path, help="write the bound port here")
    parser.add_argument(
        "--credentials-file",
        type=Path,
        help="YAML/JSON accounts clients must sign with (none: anonymous clients)",
    )
    parser.add_argument("--tls-cert", type=Path, help="PEM server certificate (chain)")
    parser.add_argument("--tls-key", type=Path, help="PEM private key of --tls-cert")
    parser.add_argument("--pop-ck-stay-ms", type=_positive, help="checkpoint stay in memory")
    parser.add_argument("--pop-ck-max-buffer", type=_positive, help="checkpoints kept in memory")
    parser.add_argument("--max-parked-requests", type=_positive, help="parked long polls")


def edge_options(args: argparse.Namespace) -> EdgeOptions:
    """Client auth and TLS per the CLIENT-EDGE flags (files read now)."""
    if (args.tls_cert is None) != (args.tls_key is None):
        raise ValueError("--tls-cert and --tls-key go together")
    return EdgeOptions(
        accounts=accounts.load(args.credentials_file) if args.credentials_file else None,
        tls=TlsFiles.load(args.tls_cert, args.tls_key) if args.tls_cert else None,
    )


def popack_settings(args: argparse.Namespace) -> PopackSettings:
    """PopackSettings with the POP tuning flags applied over the defaults."""
    base = PopackSettings()
    buffer = base.buffer
    if args.pop_ck_stay_ms is not None:
        buffer = dataclasses.replace(buffer, ck_stay_ms=args.pop_ck_stay_ms)
    if args.pop_ck_max_buffer is not None:
        tracked = max(buffer.max_tracked_cks, args.pop_ck_max_buffer * 5 // 2)
        buffer = dataclasses.replace(
            buffer, max_buffered_cks=args.pop_ck_max_buffer, max_tracked_cks=tracked
        )
    parked = args.max_parked_requests or base.max_parked_requests
    return dataclasses.replace(base, buffer=buffer, max_parked_requests=parked)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="popbroker popack")
    parser.add_argument("--store-socket", type=Path, required=True)
    running.add_data_dir_flag(parser)
    add_endpoint_flags(parser)
    running.add_metrics_flags(parser)
    parser.add_argument("--log-level", default="INFO")
    return parser


def main(argv: Sequence[str]) -> int:
    """Parse ``argv`` and run the popack role until stopped."""
    args = parser().parse_args(argv)
    running.configure_logging(args.log_level)
    try:
        metrics = running.role_metrics(args)
        edge = edge_options(args)
    except (OSError, ValueError) as exc:  # BadCredentialsFile is a ValueError
        print(f"popbroker popack: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(
            run(
                store_socket=args.store_socket,
                data_dir=args.data_dir,
                listen=args.listen,
                advertise=args.advertise,
                on_bound=lambda port: running.write_port(args.port_file, port),
                settings=popack_settings(args),
                edge=edge,
                metrics=metrics,
            )
        )
    except running.NotTheStoresDirectory as exc:
        print(f"popbroker popack: --data-dir: {exc}", file=sys.stderr)
        return 2
    return 0
