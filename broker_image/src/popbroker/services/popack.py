"""The popack role's services, wired together, with their background tasks.

:class:`PopackServices` is the composition root of the client-facing role:
one store, one clock, one :class:`~popbroker.services.popstate.PopState`, and
the services built on them. Its background tasks are the checkpoint flush /
offset commit loop and the arrival pump that wakes parked receives.

Lifecycle: :meth:`PopackServices.open` reads the store's identity (cluster,
broker name, revive queue count) so the roles can never disagree about them;
``start`` launches the tasks; ``stop`` stops them and drains the checkpoint
buffer (every in-memory CK is written, every handed-off offset committed), so
a graceful stop redelivers nothing early and loses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random

from popbroker.pop.checkpointbuffer import CheckpointBuffer
from popbroker.services.acking import Acker
from popbroker.services.checkpointing import CheckpointFlusher
from popbroker.services.clients import ClientRegistry
from popbroker.services.configcache import ConfigCache
from popbroker.services.longpolling import LongPolling
from popbroker.services.popping import Popper
from popbroker.services.popstate import PopState, QueueLockTable
from popbroker.services.pulling import Puller
from popbroker.services.receiving import Receiver
from popbroker.services.routing import Endpoint, Router
from popbroker.services.sending import Sender
from popbroker.services.settings import Clock, PopackSettings, wall_clock_ms
from popbroker.store import names
from popbroker.store.api import StoreApi

log = logging.getLogger(__name__)


class PopackServices:
    """Everything the gRPC endpoint calls (see the module docstring)."""

    def __init__(
        self,
        *,
        store: StoreApi,
        settings: PopackSettings,
        advertised: Endpoint,
        clock: Clock = wall_clock_ms,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
        self.config = ConfigCache(store, clock=clock, ttl_ms=settings.config_ttl_ms)
        self.state = PopState(
            clock=clock,
            buffer=CheckpointBuffer(settings.buffer),
            locks=QueueLockTable(clock),
            rng=rng or random.Random(),  # noqa: S311 - load spreading, not security
        )
        self.polling = LongPolling(max_parked=settings.max_parked_requests)
        self.popper = Popper(store=store, state=self.state, settings=settings)
        self.receiver = Receiver(
            popper=self.popper, config=self.config, polling=self.polling, settings=settings
        )
        self.acker = Acker(
            store=store,
            state=self.state,
            config=self.config,
            settings=settings,
            on_unblocked=self.polling.notify,
        )
        self.sender = Sender(store=store, config=self.config, settings=settings, clock=clock)
        self.puller = Puller(
            store=store, config=self.config, polling=self.polling, settings=settings
        )
        self.flusher = CheckpointFlusher(store=store, state=self.state, settings=settings)
        self.clients = ClientRegistry(clock=clock, expiry_ms=settings.client_expiry_ms)
        self.router = Router(
            config=self.config, broker_name=settings.broker_name, advertised=advertised
        )
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    async def open(
        cls,
        store: StoreApi,
        *,
        advertised: Endpoint,
        settings: PopackSettings | None = None,
        clock: Clock = wall_clock_ms,
        rng: random.Random | None = None,
    ) -> PopackServices:
        """Services whose cluster, broker name and revive queues are the store's."""
        info = await store.info()
        base = settings or PopackSettings()
        revive = names.revive_topic(info.cluster)
        topics = {t.name: t for t in await store.topics()}
        revive_queue_num = topics[revive].queue_nums if revive in topics else base.revive_queue_num
        resolved = dataclasses.replace(
            base,
            cluster=info.cluster,
            broker_name=info.broker_name,
            revive_queue_num=revive_queue_num,
        )
        return cls(store=store, settings=resolved, advertised=advertised, clock=clock, rng=rng)

    def start(self) -> None:
        """Launch the flush loop and the arrival pump."""
        self._stop.clear()
        self._tasks = [
            asyncio.create_task(self.flusher.run(self._stop), name="popack-flush"),
            asyncio.create_task(self.polling.pump(self.store), name="popack-arrivals"),
        ]

    async def stop(self, *, drain_timeout_s: float = 5.0) -> None:
        """Stop the tasks and drain the checkpoint buffer."""
        self._stop.set()
        for task in self._tasks:
            if task.get_name() == "popack-arrivals":
                task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        if not await self.flusher.drain(timeout_s=drain_timeout_s):
            log.warning("checkpoint buffer not drained within %.1f s", drain_timeout_s)
