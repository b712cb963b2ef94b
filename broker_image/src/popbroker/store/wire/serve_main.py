"""Run a ``LocalStore`` behind the store wire API until SIGTERM/SIGINT.

    python -m popbroker.store.wire.serve_main --data-dir DIR --socket PATH [--listen HOST:PORT]

The subprocess entry of the cross-process contract suite and of the store
benchmarks; ``popbroker store --data-dir DIR --socket PATH`` is meant to call
``run`` with the same arguments. Readiness is the store answering ``Info``
(``RemoteStore.wait_ready``), not a line on stdout.

Shutdown, in order: stop accepting calls and give running ones ``--grace-s``;
close the store (final flush, checkpoint, lock released). Exit status 0 after a
clean stop, 2 when the store cannot be opened or the socket cannot be bound.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from popbroker.store import errors
from popbroker.store.api import FlushMode, StoreApi
from popbroker.store.local import LocalStore
from popbroker.store.settings import StoreSettings
from popbroker.store.wire import server

log = logging.getLogger(__name__)


def build_parser(
    prog: str = "python -m popbroker.store.wire.serve_main",
) -> argparse.ArgumentParser:
    """The store role's flags; ``popbroker store`` adds the admin API's to them."""
    parser = argparse.ArgumentParser(prog=prog)
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
    return parser


def parse_args(
    argv: Sequence[str] | None, parser: argparse.ArgumentParser | None = None
) -> argparse.Namespace:
    parser = parser or build_parser()
    args = parser.parse_args(argv)
    if args.socket is None and args.listen is None:
        parser.error("give --socket, --listen or both")
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


async def run(
    data_dir: Path,
    settings: StoreSettings,
    *,
    socket_path: Path | None,
    listen: str | None,
    grace_s: float = 2.0,
    repair: bool = False,
    on_open: Callable[[StoreApi], Awaitable[Callable[[], Awaitable[None]]]] | None = None,
) -> None:
    """Open the store, serve it until a termination signal, then stop in order.

    ``on_open`` starts a companion server on the open store (the admin API of
    ``popbroker store``) and returns its stop function, called first at shutdown.
    """
    store = LocalStore.open(data_dir, settings, repair=repair)
    try:
        grpc_server = await server.serve(store, socket_path=socket_path, listen=listen)
        stop_companion = await on_open(store) if on_open is not None else None
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
        log.info("store wire: stopping")
        if stop_companion is not None:
            await stop_companion()
        await grpc_server.stop(grace_s)
    finally:
        await store.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        settings = settings_from(args)
        asyncio.run(
            run(
                args.data_dir,
                settings,
                socket_path=args.socket,
                listen=args.listen,
                grace_s=args.grace_s,
                repair=args.repair,
            )
        )
    except (errors.StoreError, OSError, ValueError, RuntimeError) as exc:
        print(f"popbroker store: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
