"""Command lines of the ``popack``, ``revive`` and ``all`` roles (``popbroker ROLE ...``).

    popbroker popack --store-socket PATH --listen HOST:PORT [--advertise HOST:PORT]
                     [CLIENT-EDGE] [POP-TUNING] [METRICS]
    popbroker revive --store-socket PATH [METRICS]
    popbroker all    --data-dir DIR --listen HOST:PORT [--admin-listen HOST:PORT]
                     [--admin-token-file PATH] [--cluster NAME] [--broker-name NAME]
                     [--flush-mode sync|async] [CLIENT-EDGE] [POP-TUNING] [METRICS]

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
(``--admin-port-file`` the admin port)
(written atomically once the endpoint serves), which is how tests and
supervisors learn it without parsing logs. ``--advertise`` is the endpoint put
into routes (default: the listen host and the bound port).

Exit status: 0 after a clean stop (SIGTERM/SIGINT), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from popbroker.admin import server as admin_server
from popbroker.auth import accounts
from popbroker.grpc import server
from popbroker.grpc.edge import EdgeOptions, RoleMetrics, TlsFiles
from popbroker.metrics import exposition
from popbroker.services.settings import PopackSettings
from popbroker.store.api import FlushMode
from popbroker.store.settings import StoreSettings

log = logging.getLogger(__name__)


def _parser(role: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"popbroker {role}")
    if role in ("popack", "revive"):
        parser.add_argument("--store-socket", type=Path, required=True)
    if role == "all":
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
    if role in ("popack", "all"):
        parser.add_argument("--listen", required=True, help="HOST:PORT for the v2 endpoint")
        parser.add_argument("--advertise", help="HOST:PORT put into routes")
        parser.add_argument("--port-file", type=Path, help="write the bound port here")
        _edge_flags(parser)
    add_metrics_flags(parser)
    parser.add_argument("--log-level", default="INFO")
    return parser


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text}: must be a positive integer")
    return value


def _edge_flags(parser: argparse.ArgumentParser) -> None:
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


def add_metrics_flags(parser: argparse.ArgumentParser) -> None:
    """``--metrics-listen`` and ``--metrics-port-file`` (every role, the store's too)."""
    parser.add_argument("--metrics-listen", help="HOST:PORT of the Prometheus /metrics endpoint")
    parser.add_argument("--metrics-port-file", type=Path, help="write the metrics port here")


def role_metrics(args: argparse.Namespace) -> RoleMetrics | None:
    """The role's metrics endpoint per the flags (None without ``--metrics-listen``)."""
    if not args.metrics_listen:
        return None
    exposition.split_host_port(args.metrics_listen)  # fail on a bad value before starting
    return RoleMetrics(
        args.metrics_listen, on_bound=lambda port: write_port(args.metrics_port_file, port)
    )


def _edge(args: argparse.Namespace) -> EdgeOptions:
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


def write_port(path: Path | None, port: int) -> None:
    if path is None:
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{port}\n")
    os.replace(tmp, path)


def main(role: str, argv: Sequence[str]) -> int:
    """Parse ``argv`` for ``role`` and run it until stopped."""
    args = _parser(role).parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    try:
        metrics = role_metrics(args)
        edge = _edge(args) if role != "revive" else None
        admin_token = admin_server.load_token(args.admin_token_file) if role == "all" else None
    except (OSError, ValueError) as exc:  # BadCredentialsFile is a ValueError
        print(f"popbroker {role}: {exc}", file=sys.stderr)
        return 2
    if role == "popack":
        asyncio.run(
            server.run_popack(
                store_socket=args.store_socket,
                listen=args.listen,
                advertise=args.advertise,
                on_bound=lambda port: write_port(args.port_file, port),
                settings=popack_settings(args),
                edge=edge,
                metrics=metrics,
            )
        )
    elif role == "revive":
        asyncio.run(server.run_revive(store_socket=args.store_socket, metrics=metrics))
    else:
        settings = StoreSettings(
            cluster=args.cluster,
            broker_name=args.broker_name,
            flush_mode=FlushMode(args.flush_mode),
            segment_bytes=args.segment_bytes,
        )
        asyncio.run(
            server.run_all(
                data_dir=args.data_dir,
                store_settings=settings,
                listen=args.listen,
                advertise=args.advertise,
                admin_listen=args.admin_listen,
                admin_token=admin_token,
                on_bound=lambda port: write_port(args.port_file, port),
                on_admin_bound=lambda port: write_port(args.admin_port_file, port),
                settings=popack_settings(args),
                edge=edge,
                metrics=metrics,
            )
        )
    return 0
