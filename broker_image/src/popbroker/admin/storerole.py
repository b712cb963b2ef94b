"""``popbroker store``: the store wire API plus the admin API on the same open store.

    popbroker store --data-dir DIR --socket PATH [--listen HOST:PORT]
                    [--admin-listen HOST:PORT] [--admin-token-file PATH] ...

In a broker pod the store container owns the data volume, so it is the one that
answers the operator's and the audits' admin calls (DESIGN §3): the admin server
runs in the store process, beside the wire server the popack and revive roles
use. Without ``--admin-listen`` this is exactly ``serve_main``. The admin
server's health (grpc.health.v1) is what the pod's readiness probe asks.

Lives here, not in ``popbroker.store``: the store never imports the admin server.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from popbroker.admin import server as admin_server
from popbroker.store import errors
from popbroker.store.api import StoreApi
from popbroker.store.wire import serve_main


def main(argv: Sequence[str] | None = None) -> int:
    parser = serve_main.build_parser(prog="popbroker store")
    parser.add_argument("--admin-listen", help="HOST:PORT of the admin API (none: no admin API)")
    parser.add_argument(
        "--admin-token-file",
        type=Path,
        help="the admin token (else $POPFLEET_ADMIN_TOKEN; neither: no token)",
    )
    args = serve_main.parse_args(argv, parser)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    on_open: Callable[[StoreApi], Awaitable[Callable[[], Awaitable[None]]]] | None = None
    if args.admin_listen:
        token = admin_server.load_token(args.admin_token_file)
        listen = str(args.admin_listen)

        async def start_admin(store: StoreApi) -> Callable[[], Awaitable[None]]:
            admin = await admin_server.serve_admin(store, listen=listen, token=token)
            return admin.stop

        on_open = start_admin
    try:
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
