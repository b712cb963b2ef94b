"""Command lines of the ``popack``, ``revive`` and ``all`` roles (``popbroker ROLE ...``).

    popbroker popack --store-socket PATH --listen HOST:PORT [--advertise HOST:PORT]
    popbroker revive --store-socket PATH
    popbroker all    --data-dir DIR --listen HOST:PORT [--admin-listen HOST:PORT]
                     [--admin-token-file PATH] [--cluster NAME] [--broker-name NAME]
                     [--flush-mode sync|async]

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
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from popbroker.admin import server as admin_server
from popbroker.grpc import server
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
    parser.add_argument("--log-level", default="INFO")
    return parser


def _write_port(path: Path | None, port: int) -> None:
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
    if role == "popack":
        asyncio.run(
            server.run_popack(
                store_socket=args.store_socket,
                listen=args.listen,
                advertise=args.advertise,
                on_bound=lambda port: _write_port(args.port_file, port),
            )
        )
    elif role == "revive":
        asyncio.run(server.run_revive(store_socket=args.store_socket))
    else:
        if args.admin_listen:
            log.warning(
                "--admin-listen %s: the admin API is not part of this build", args.admin_listen
            )
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
                admin_token=admin_server.load_token(args.admin_token_file),
                on_bound=lambda port: _write_port(args.port_file, port),
                on_admin_bound=lambda port: _write_port(args.admin_port_file, port),
            )
        )
    return 0
