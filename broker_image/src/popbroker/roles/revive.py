"""The ``revive`` role: revive loops against a store role (``popbroker revive``).

    popbroker revive --store-socket PATH [--data-dir PATH]
                     [--metrics-listen HOST:PORT] [--metrics-port-file PATH]

``--data-dir``: the store role's data directory, mounted here too: revive's
reads of the revive log come from its files (:mod:`popbroker.store.direct`),
as popack's do.

:class:`ReviveRole` is the revive service and its task, started on any
``StoreApi`` (the ``all`` role starts it on its in-process store). The service's
settings are :class:`~popbroker.services.settings.ReviveRoleSettings` with the
cluster and broker name the store reports.

Runs until SIGTERM/SIGINT, then stops revive and closes the store. Exit status
0 after a clean stop, 2 on bad arguments or a ``--data-dir`` without the store.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from popbroker.roles import running
from popbroker.services.configcache import ConfigCache
from popbroker.services.reviving import ReviveService
from popbroker.services.settings import Clock, ReviveRoleSettings, wall_clock_ms
from popbroker.store.api import StoreApi


@dataclass
class ReviveRole:
    """The revive service and its task."""

    service: ReviveService
    task: asyncio.Task[None]
    stop_event: asyncio.Event

    @classmethod
    async def start(
        cls,
        store: StoreApi,
        *,
        settings: ReviveRoleSettings | None = None,
        clock: Clock = wall_clock_ms,
    ) -> ReviveRole:
        info = await store.info()
        resolved = dataclasses.replace(
            settings or ReviveRoleSettings(),
            cluster=info.cluster,
            broker_name=info.broker_name,
        )
        service = ReviveService(
            store=store,
            settings=resolved,
            clock=clock,
            config=ConfigCache(store, clock=clock),
        )
        await service.open()
        stop_event = asyncio.Event()
        task = asyncio.create_task(service.run(stop_event), name="revive")
        return cls(service, task, stop_event)

    async def stop(self) -> None:
        self.stop_event.set()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def run(
    *,
    store_socket: Path,
    data_dir: Path | None = None,
    metrics: running.RoleMetrics | None = None,
) -> None:
    """The revive role: revive loops against a store role."""
    running.freeze_startup_objects()
    stop = running.stop_on_signals()
    store = await running.remote_store(store_socket, data_dir=data_dir)
    try:
        role = await ReviveRole.start(store)
        if metrics is not None:
            metrics.for_revive().attach(store, role.service)
            metrics.for_direct_reads(store)
            await metrics.start()
        await stop.wait()
        await role.stop()
    finally:
        if metrics is not None:
            await metrics.stop()
        await store.close()


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="popbroker revive")
    parser.add_argument("--store-socket", type=Path, required=True)
    running.add_data_dir_flag(parser)
    running.add_metrics_flags(parser)
    parser.add_argument("--log-level", default="INFO")
    return parser


def main(argv: Sequence[str]) -> int:
    """Parse ``argv`` and run the revive role until stopped."""
    args = parser().parse_args(argv)
    running.configure_logging(args.log_level)
    try:
        metrics = running.role_metrics(args)
    except (OSError, ValueError) as exc:
        print(f"popbroker revive: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(run(store_socket=args.store_socket, data_dir=args.data_dir, metrics=metrics))
    except running.NotTheStoresDirectory as exc:
        print(f"popbroker revive: --data-dir: {exc}", file=sys.stderr)
        return 2
    return 0
