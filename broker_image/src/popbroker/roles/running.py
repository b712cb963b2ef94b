"""What every role process shares: signals, port files, the store socket, ``/metrics``.

* :func:`stop_on_signals` -- an event set by SIGTERM/SIGINT; every role runs
  until it is set, then stops in its own order.
* :func:`freeze_startup_objects` -- what is alive when a role starts leaves the garbage
  collector's generations, so full collections walk only what the broker made since.
* :func:`write_port` -- ``--port-file`` and friends: the bound port, written
  atomically once the server serves (how tests and supervisors learn a port 0
  without parsing logs).
* :func:`remote_store` -- the ``popack`` and ``revive`` roles' store: the store
  role's Unix socket, once it answers ``Info``; with the store's data directory,
  reads come from its files (:mod:`popbroker.store.direct`).
* :func:`add_metrics_flags`, :func:`role_metrics`, :class:`RoleMetrics` -- one
  role process's Prometheus registry, the per-role metric sets in it, and its
  ``/metrics`` server (see :mod:`popbroker.metrics`).
* :func:`configure_logging` -- ``--log-level`` for the process.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry

from popbroker.metrics import exposition
from popbroker.metrics.admin import AdminMetrics
from popbroker.metrics.consumers import ConsumerLagMetrics, observe_volume
from popbroker.metrics.directreads import observe_direct_reads
from popbroker.metrics.gcpauses import GcPauses
from popbroker.metrics.popack import PopackMetrics
from popbroker.metrics.revive import ReviveMetrics
from popbroker.metrics.store import observe_config_writes, observe_flushes
from popbroker.store.api import StoreInfo
from popbroker.store.direct import DirectReads
from popbroker.store.local import LocalStore
from popbroker.store.wire.client import RemoteStore

STORE_READY_TIMEOUT_S = 60.0


def stop_on_signals() -> asyncio.Event:
    """An event that SIGTERM or SIGINT sets (on the running loop)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    return stop


def freeze_startup_objects() -> None:
    """Move every object alive now (the interpreter's and the imported modules': ~50k) to
    the collector's permanent generation (``gc.freeze``). They live as long as the process
    anyway, and each full collection walked them all: 20-40 ms of a stalled event loop
    per collection on this project's 2-core machines, the tail of the latency at half load.
    Called once by each role as it starts, after its imports."""
    gc.collect()
    gc.freeze()


def add_data_dir_flag(parser: argparse.ArgumentParser) -> None:
    """``--data-dir``: the store role's data directory, mounted here too (popack, revive)."""
    parser.add_argument(
        "--data-dir", type=Path, help="the store's data directory: read its files directly"
    )


class NotTheStoresDirectory(ValueError):
    """``--data-dir`` does not hold the store's files."""


async def remote_store(store_socket: Path, *, data_dir: Path | None = None) -> RemoteStore:
    """The store role behind ``store_socket``, once it answers; with ``data_dir`` (the
    store's, mounted here too) its reads come from the files (``DirectReads``)."""
    store = RemoteStore.connect(f"unix:{store_socket}")
    try:
        info = await store.wait_ready(timeout_s=STORE_READY_TIMEOUT_S)
        if data_dir is not None:
            store.read_directly(direct_reads(data_dir, info))
    except BaseException:
        await store.close()
        raise
    return store


def direct_reads(data_dir: Path, info: StoreInfo) -> DirectReads:
    """Reads of the store ``info`` describes, from ``data_dir``; ``NotTheStoresDirectory``
    when the directory holds no commit log or the store does not tell its layout."""
    if not (data_dir / "commitlog").is_dir():
        raise NotTheStoresDirectory(f"{data_dir} holds no commitlog/: not the store's data dir")
    if info.segment_bytes <= 0 or info.cq_entries_per_file <= 0:
        raise NotTheStoresDirectory("the store does not tell its file layout (an older store?)")
    return DirectReads(
        data_dir, segment_bytes=info.segment_bytes, cq_entries_per_file=info.cq_entries_per_file
    )


def write_port(path: Path | None, port: int) -> None:
    """Write ``port`` to ``path`` atomically (nothing when ``path`` is None)."""
    if path is None:
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{port}\n")
    os.replace(tmp, path)


def configure_logging(level: str, *, separator: str = "") -> None:
    """The process's log format at ``level`` (``separator`` after the logger name)."""
    logging.basicConfig(
        level=level.upper(),
        format=f"%(asctime)s %(levelname)s %(name)s{separator} %(message)s",
    )
    grpc_core = logging.getLogger(GRPC_CORE_LOGGER)
    if not any(isinstance(f, ClientGoneFilter) for f in grpc_core.filters):
        grpc_core.addFilter(ClientGoneFilter())


GRPC_CORE_LOGGER = "grpc._cython.cygrpc"
CLIENT_GONE = "ExecuteBatchError raised in core by servicer method"


class ClientGoneFilter(logging.Filter):
    """grpc.aio logs an ERROR with a traceback when an answer cannot be written because
    the client already closed the call (a kubelet probe that timed out on a busy node, a
    client that gave up): the server did nothing wrong. Such a line is kept, as one
    WARNING line saying so; every other record passes unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and str(record.msg).startswith(CLIENT_GONE):
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.msg = f"{record.getMessage()}: the client closed the call before its answer"
            record.args, record.exc_info, record.exc_text = None, None, None
        return True


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


@dataclass
class RoleMetrics:
    """One process's metrics: a registry, the role sets in it, and the HTTP endpoint."""

    listen: str
    on_bound: Callable[[int], None] = lambda port: None
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    popack: PopackMetrics | None = None
    revive: ReviveMetrics | None = None
    consumers: ConsumerLagMetrics | None = None
    server: exposition.MetricsServer | None = None
    gc_pauses: GcPauses | None = None

    def for_popack(self) -> PopackMetrics:
        self.popack = PopackMetrics(self.registry)
        return self.popack

    def for_revive(self) -> ReviveMetrics:
        self.revive = ReviveMetrics(self.registry)
        return self.revive

    def for_store(self, store: LocalStore) -> None:
        observe_flushes(store.flusher, self.registry)
        observe_config_writes(store, self.registry)
        observe_volume(store.data_dir, self.registry)
        self.consumers = ConsumerLagMetrics(self.registry, store)

    def for_direct_reads(self, store: RemoteStore) -> None:
        """How ``store``'s reads went, when it reads the store's files (``--data-dir``)."""
        if store.direct_reads is not None:
            observe_direct_reads(store.direct_reads, self.registry)

    def for_admin(self) -> AdminMetrics:
        """The admin API's call counter (the ``all`` role serves admin in-process)."""
        return AdminMetrics(self.registry)

    async def start(self) -> None:
        self.gc_pauses = GcPauses(self.registry)
        self.gc_pauses.install()
        refreshers = [
            m.refresh for m in (self.popack, self.revive, self.consumers) if m is not None
        ]
        self.server = await exposition.serve_metrics(
            self.listen, self.registry, refreshers=refreshers
        )
        self.on_bound(self.server.port)

    async def stop(self) -> None:
        if self.gc_pauses is not None:
            self.gc_pauses.remove()
        if self.server is not None:
            await self.server.stop()
