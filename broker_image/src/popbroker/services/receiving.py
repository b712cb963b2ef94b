"""A receive (``ReceiveMessage``): validate, pop, long-poll, answer in time.

Steps:

  1. Validate the batch size (1..32), the invisible time (1 s .. 12 h; absent
     means ``default_invisible_ms``), the filter (TAG only; ``*``, empty or
     ``A||B``), the topic (exists, readable) and the group (exists, consuming).
  2. Decide the queues: a push consumer's assigned queue id is honoured
     (DESIGN §3.3: in PULL mode a queue belongs to one consumer); anyone else
     — the SimpleConsumer round-robins the route's queues — pops every queue
     of this broker, as the proxy does, so no receive waits on an empty queue
     while another holds messages.
  3. The poll budget: the client's long-polling timeout capped at
     ``max_long_polling_ms`` and at the time left before the client's deadline
     minus ``long_polling_margin_ms``, so the answer always arrives before the
     client gives up.
  4. Register a long-polling waiter (bounded: ``TOO_MANY_REQUESTS`` when full),
     then attempt a pop; while it is empty and budget remains, wait for a
     wake-up (or for a blocked FIFO queue's unblock time) and attempt again.
     A wait that ends with the budget and no wake-up answers at once: the
     waiter was registered before the first attempt, so nothing arrived that
     an attempt could find, and a last round of store reads at the end of the
     budget would only eat into the margin before the client's deadline.
  5. A non-empty answer that saw more messages behind it wakes the next
     parked receive of the same key.
  6. A push consumer's receive carries ``still_assigned`` (see
     :meth:`popbroker.services.routing.Router.holds`), checked before the
     first pop and after every wait: once its queue is no longer assigned to
     it (a rebalance since the client's last ``QueryAssignment``) it pops
     nothing more, passes on the wake-up it took, and answers "no message"
     at the end of its poll budget (answering at once would make the client
     spin until its next assignment refresh).

Callers: the gRPC endpoint's ReceiveMessage handler.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from popbroker.pop import errors as pop_errors
from popbroker.pop import popping as planning
from popbroker.services import errors
from popbroker.services.configcache import ConfigCache
from popbroker.services.longpolling import LongPolling, Waiter
from popbroker.services.messages import DeliveredMessage
from popbroker.services.popattempt import PopRequest
from popbroker.services.popping import Popper
from popbroker.services.settings import PopackSettings
from popbroker.store import filters
from popbroker.store.api import Permission
from popbroker.store.errors import InvalidArgument


@dataclass(frozen=True, slots=True)
class ReceiveRequest:
    """A receive as the client asked for it (already decoded from the wire)."""

    group: str
    topic: str
    batch_size: int
    invisible_ms: int | None = None
    queue_id: int = planning.ALL_QUEUES
    honour_queue_id: bool = False
    filter_expression: str = "*"
    sql_filter: bool = False
    poll_ms: int | None = None  # the client's long-polling timeout
    deadline_remaining_ms: int | None = None  # time left before the client's deadline
    attempt_id: str | None = None
    still_assigned: Callable[[], Awaitable[bool]] | None = None  # step 6 (push consumers)


def poll_budget_ms(
    settings: PopackSettings, *, poll_ms: int | None, deadline_remaining_ms: int | None
) -> int:
    """How long a receive or pull may park (step 3; also used by pulling)."""
    budget = settings.max_long_polling_ms if poll_ms is None else poll_ms
    budget = min(budget, settings.max_long_polling_ms)
    if deadline_remaining_ms is not None:
        budget = min(budget, deadline_remaining_ms - settings.long_polling_margin_ms)
    return max(0, budget)


async def _still_assigned(request: ReceiveRequest) -> bool:
    return request.still_assigned is None or await request.still_assigned()


class Receiver:
    """Receives for one popack role (see the module docstring)."""

    def __init__(
        self,
        *,
        popper: Popper,
        config: ConfigCache,
        polling: LongPolling,
        settings: PopackSettings,
    ) -> None:
        self._popper = popper
        self._config = config
        self._polling = polling
        self._settings = settings

    async def receive(self, request: ReceiveRequest) -> tuple[DeliveredMessage, ...]:
        """Steps 1-6; an empty tuple means "no message" (``MESSAGE_NOT_FOUND``)."""
        pop_request = await self._validate(request)
        poll_ms = self.poll_budget_ms(request)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + poll_ms / 1000
        if not await _still_assigned(request):
            await asyncio.sleep(poll_ms / 1000)  # step 6
            return ()
        waiter: Waiter | None = None
        unassigned = False
        if poll_ms > 0:
            waiter = self._polling.register(
                pop_request.topic, pop_request.group, pop_request.queue_id
            )
        with waiter if waiter is not None else contextlib.nullcontext():
            while True:
                outcome = await self._popper.pop(pop_request)
                if outcome.messages or waiter is None:
                    break
                remaining_s = deadline - loop.time()
                if remaining_s <= 0:
                    break
                if outcome.retry_at_ms is not None:
                    until_unblock_s = (outcome.retry_at_ms - self._popper.now_ms()) / 1000
                    remaining_s = min(remaining_s, max(until_unblock_s, 0.005))
                woken = await waiter.wait(remaining_s)
                if not woken and deadline - loop.time() <= 0:
                    break  # budget spent and nothing arrived: answer now, no last attempt
                if not await _still_assigned(request):
                    unassigned = True
                    break
        if unassigned:  # step 6
            self._polling.notify(pop_request.topic, pop_request.group, pop_request.queue_id)
            await asyncio.sleep(max(0.0, deadline - loop.time()))
            return ()
        if outcome.messages and outcome.rest_num > 0:
            self._polling.notify(pop_request.topic, pop_request.group, pop_request.queue_id)
        return outcome.messages

    def poll_budget_ms(self, request: ReceiveRequest) -> int:
        """Step 3."""
        return poll_budget_ms(
            self._settings,
            poll_ms=request.poll_ms,
            deadline_remaining_ms=request.deadline_remaining_ms,
        )

    async def _validate(self, request: ReceiveRequest) -> PopRequest:
        batch = planning.validate_batch_size(request.batch_size)
        invisible_ms = planning.validate_invisible_ms(
            self._settings.default_invisible_ms
            if request.invisible_ms is None
            else request.invisible_ms
        )
        if request.sql_filter:
            raise errors.IllegalFilterExpression("SQL92 filters are not supported; use TAG")
        try:
            filters.parse_filter(request.filter_expression)
        except InvalidArgument as exc:
            raise errors.IllegalFilterExpression(str(exc)) from None
        topic = await self._config.topic(request.topic)
        if not topic.perm & Permission.READ:
            raise errors.TopicNotReadable(f"topic {topic.name!r} is not readable")
        group = await self._config.group(request.group)
        if not group.consume_enable:
            raise errors.ConsumeDisabled(f"group {group.name!r} has consumption disabled")
        queue_id = request.queue_id if request.honour_queue_id else planning.ALL_QUEUES
        if queue_id >= topic.read_queue_nums:
            raise pop_errors.IllegalQueueId(
                f"queue {queue_id} >= read queue number {topic.read_queue_nums}"
            )
        return PopRequest(
            group=group.name,
            topic=topic.name,
            queue_id=queue_id if queue_id >= 0 else planning.ALL_QUEUES,
            read_queue_num=topic.read_queue_nums,
            max_messages=batch,
            invisible_ms=invisible_ms,
            tag_filter=request.filter_expression.strip() or "*",
            fifo=group.fifo,
            attempt_id=request.attempt_id,
            max_reconsume_times=group.max_reconsume_times,
        )
