"""A change round whose snapshot went stale while it waited runs again
(``runtime.reconcile_round``, through ``fanning.run``).

Seen in CI: a resync tick of a switched ConsumerGroup held the object's lock while it waited
for a round slot during a broker outage, and wrote ``ModeApplied=False``; the change round
queued behind it still held the event's snapshot (``ModeApplied=True``, generation 1), so
when it confirmed the switch after the outage it did not tell the recovery (no
``AllBrokersConfirmed`` Event).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, cast

import kopf
import pytest
from kopf._core.engines.posting import settings_var  # kopf.event reads it; not re-exported

from popfleet_api.testing import InMemoryBrokerAdmin
from popfleet_operator.handlers import fanning, runtime, topics
from tests.unit.operator.test_resync_skips_brokers_when_nothing_changed import (
    broker_calls,
    make_runtime,
    topic_body,
)

NOT_SYNCED: dict[str, Any] = {}


@pytest.fixture(autouse=True)
def no_event_posting() -> Iterator[None]:
    """What kopf sets up for handlers: here with Event posting off."""
    settings = kopf.OperatorSettings()
    settings.posting.enabled = False
    token = settings_var.set(settings)
    yield
    settings_var.reset(token)


async def run(
    rt: runtime.Runtime, memo: dict[str, Any], *, retry: int | None
) -> tuple[kopf.Patch, BaseException | None]:
    patch = kopf.Patch()
    try:
        await fanning.run(
            topics.TOPICS,
            body=topic_body(NOT_SYNCED),
            patch=patch,
            memo=memo,
            logger=cast(Any, None),
            retry=retry,
            index=cast(Any, {}),
        )
    except (kopf.TemporaryError, kopf.PermanentError) as exc:
        return patch, exc
    return patch, None


async def test_a_change_round_after_another_rounds_write_runs_again(
    brokers: dict[str, InMemoryBrokerAdmin],
) -> None:
    rt = make_runtime(brokers)
    memo: dict[str, Any] = {"runtime": rt}
    lock = runtime.lock(memo)
    await lock.acquire()  # another round of the object is under way
    change = asyncio.create_task(run(rt, memo, retry=0))
    await asyncio.sleep(0)  # the change round waits for the lock with its snapshot
    memo[runtime.STATUS_WRITES] = 1  # ... and the round it waited for patched the status
    lock.release()
    patch, raised = await change
    assert isinstance(raised, kopf.TemporaryError)
    assert raised.delay == runtime.STALE_RETRY_S
    assert patch == {}
    assert broker_calls(brokers) == []  # nothing done on the stale snapshot


async def test_rounds_without_a_write_in_between_run_and_count_their_writes(
    brokers: dict[str, InMemoryBrokerAdmin],
) -> None:
    rt = make_runtime(brokers)
    memo: dict[str, Any] = {"runtime": rt}
    patch, raised = await run(rt, memo, retry=0)
    assert raised is None
    assert patch.status["conditions"]  # the first round wrote the status ...
    assert memo[runtime.STATUS_WRITES] == 1  # ... and said so for the rounds waiting
    patch, raised = await run(rt, memo, retry=1)  # its own write was before it started
    assert raised is None


async def test_a_tick_has_a_live_body_and_never_reruns(
    brokers: dict[str, InMemoryBrokerAdmin],
) -> None:
    rt = make_runtime(brokers)
    memo: dict[str, Any] = {"runtime": rt}
    lock = runtime.lock(memo)
    await lock.acquire()
    tick = asyncio.create_task(run(rt, memo, retry=None))
    await asyncio.sleep(0)
    memo[runtime.STATUS_WRITES] = 1
    lock.release()
    _, raised = await tick
    assert raised is None
    assert broker_calls(brokers)  # it did its round
