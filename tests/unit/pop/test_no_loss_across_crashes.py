"""Properties of the whole pure engine, driven by the PopWorld simulation.

Across arbitrary pops, ack subsets, change-invisible calls, CK write failures
(including "written but reported failed"), revive failures, persistence points
and crashes (all in-memory state dropped):

  * nothing is lost: every matching message is eventually acked or dead-lettered
    (upstream #7 and #19: partial and failed revives still redeliver later);
  * the pop cursor never hands out an in-flight offset twice (asserted inside
    ``PopWorld.pop`` per epoch between crashes);
  * the committed offset never passes a batch that is not handed off
    (asserted inside ``PopWorld.commit``).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.pop.popworld import INVISIBLE_CHOICES_MS, PopWorld

OPS = (
    ("produce", 1),
    ("pop", 4),
    ("ack", 4),
    ("change", 1),
    ("tick", 3),
    ("background", 3),
    ("flush", 1),
    ("io", 1),
    ("commit", 1),
    ("revive", 1),
    ("persist", 1),
    ("crash", 1),
)
_WEIGHTED = tuple(name for name, weight in OPS for _ in range(weight))

operations = st.lists(
    st.tuples(st.sampled_from(_WEIGHTED), st.integers(0, 2**31 - 1)), min_size=30, max_size=90
)


def _run(world: PopWorld, ops: list[tuple[str, int]]) -> None:
    for op, arg in ops:
        if op == "produce":
            world.produce(1 + arg % 8, arg >> 4)
        elif op == "pop":
            world.pop(
                queue_id=(arg % 3) - 1,
                max_messages=1 + (arg >> 2) % 32,
                invisible_ms=INVISIBLE_CHOICES_MS[(arg >> 7) % len(INVISIBLE_CHOICES_MS)],
                random_percent=(arg >> 9) % 100,
            )
        elif op == "ack":
            world.ack(arg)
        elif op == "change":
            world.change_invisible(
                arg, INVISIBLE_CHOICES_MS[arg % len(INVISIBLE_CHOICES_MS)] - 1_000
            )
        elif op == "tick":
            world.now_ms += arg % 40_000
        elif op == "background":  # the popack and revive loops, one round
            world.flush()
            world.complete_writes(arg if arg % 3 == 0 else 0)
            world.commit()
            world.revive(arg if arg % 5 == 0 else 0)
            if arg % 2:
                world.persist()
        elif op == "flush":
            world.flush()
        elif op == "io":
            world.complete_writes(arg)
        elif op == "commit":
            world.commit()
        elif op == "revive":
            world.revive(arg)
        elif op == "persist":
            world.persist()
        elif op == "crash":
            world.crash()


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 30), operations)
def test_nothing_is_lost_across_acks_changes_failures_and_crashes(
    initial: int, ops: list[tuple[str, int]]
) -> None:
    world = PopWorld()
    world.produce(initial, 0)
    world.produce(initial // 2, 1)
    _run(world, ops)
    world.drain()
    assert world.lost_ids() == set()


@settings(max_examples=60, deadline=None)
@given(operations)
def test_without_crashes_acks_in_time_are_never_redelivered(
    ops: list[tuple[str, int]],
) -> None:
    # Upstream #1/#2/#3787/#8835: acks before the deadline — merged in memory, merged while
    # the CK is being written, or written as ACK records — prevent every redelivery.
    world = PopWorld(strict=True)
    world.produce(20, 0)
    world.produce(20, 1)
    clean = [
        (op, 0 if op == "io" else arg)
        for op, arg in ops
        if op not in ("crash", "persist", "background")
    ]
    _run(world, clean)
    world.drain()
    assert world.lost_ids() == set()
    assert world.ledger.stats().pending == 0


def test_simple_story_pop_ack_some_expire_rest() -> None:
    world = PopWorld()
    world.produce(10, 0)
    delivered = world.pop(queue_id=0, max_messages=32, invisible_ms=60_000, random_percent=50)
    assert delivered == 4  # ids 0 and 5 do not match the filter; the scan stops at 6 entries
    for _ in range(3):
        world.ack(0)
    world.now_ms += 61_000
    world.flush()
    world.complete_writes(0)
    world.commit()
    world.revive(0)
    retried = world.queues[("%RETRY%billing+orders", 0)]
    assert [reconsume for _, reconsume in retried] == [1]
    world.drain()
    assert world.lost_ids() == set()
