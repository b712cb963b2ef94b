"""One contract, two implementations of ``BrokerAdminApi`` (STYLE §11).

Every test here runs against a real broker (``BrokerAdmin`` over gRPC to
``serve_admin`` on a ``LocalStore``) and against ``popfleet_api.testing.
InMemoryBrokerAdmin``, so the fake the operator's unit tests use refuses and
answers like a broker does.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from popbroker.admin.server import serve_admin
from popfleet_api import errors
from popfleet_api.client import BrokerAdmin, BrokerAdminApi
from popfleet_api.models import (
    ConsumeMode,
    ConsumeModeSetting,
    Group,
    Member,
    OffsetTableKey,
    Permission,
    Topic,
)
from popfleet_api.testing import InMemoryBrokerAdmin
from tests.integration.admin.conftest import BROKER, CLUSTER, REVIVE_QUEUES, open_store


@dataclass
class Subject:
    admin: BrokerAdminApi
    commit_offset: Callable[..., object]  # (*, group, topic, queue_id, queue_offset)


@pytest.fixture(params=["broker", "memory"])
async def subject(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Subject]:
    if request.param == "memory":
        memory = InMemoryBrokerAdmin(
            cluster=CLUSTER, broker_name=BROKER, revive_queue_num=REVIVE_QUEUES
        )
        yield Subject(memory, memory.commit_offset)
        return
    store = open_store(tmp_path / "data")
    server = await serve_admin(store, listen="127.0.0.1:0")
    try:
        async with BrokerAdmin(f"127.0.0.1:{server.port}", timeout_s=5.0) as client:
            yield Subject(client, store.commit_offset)
    finally:
        await server.stop(None)
        await store.close()


async def _seed_offset(
    subject: Subject, *, group: str, topic: str, queue_id: int, queue_offset: int
) -> None:
    outcome = subject.commit_offset(
        group=group, topic=topic, queue_id=queue_id, queue_offset=queue_offset
    )
    if inspect.isawaitable(outcome):
        await outcome


async def test_topics(subject: Subject) -> None:
    admin = subject.admin
    assert (await admin.put_topic(Topic("orders", 4, 4))).created
    again = await admin.put_topic(Topic("orders", 4, 8, perm=Permission.READ))
    assert not again.created
    assert again.topic == Topic("orders", 4, 8, Permission.READ)
    with pytest.raises(errors.FailedPrecondition) as shrink:
        await admin.put_topic(Topic("orders", 4, 7))
    assert shrink.value.reason == "QUEUE_SHRINK"
    assert "has 4 read and 8 write queues" in shrink.value.message
    assert await admin.topics() == [again.topic]
    system = [t for t in await admin.topics(include_system=True) if t.system]
    assert [(t.name, t.read_queue_nums) for t in system] == [
        (f"rmq_sys_REVIVE_LOG_{CLUSTER}", REVIVE_QUEUES)
    ]
    with pytest.raises(errors.FailedPrecondition):
        await admin.delete_topic(system[0].name)
    with pytest.raises(errors.NotFound):
        await admin.delete_topic("nope")
    await admin.delete_topic("orders")
    assert await admin.topics() == []


async def test_topics_and_groups_by_name(subject: Subject) -> None:
    admin = subject.admin
    for name in ("a", "b", "c"):
        await admin.put_topic(Topic(name, 1, 1))
        await admin.put_group(Group(f"g-{name}"))
    assert await admin.topics(names=["c", "a", "nope"]) == [Topic("a", 1, 1), Topic("c", 1, 1)]
    assert await admin.topics(names={"nope"}) == []
    assert await admin.topics(names=[]) == []
    assert len(await admin.topics(names=None)) == 3
    revive = f"rmq_sys_REVIVE_LOG_{CLUSTER}"
    assert await admin.topics(names=[revive, "b"]) == [Topic("b", 1, 1)]
    assert [t.name for t in await admin.topics(names=[revive], include_system=True)] == [revive]
    assert await admin.groups(names=["g-b", "g-z"]) == [Group("g-b")]
    assert await admin.groups(names=[]) == []
    assert [g.name for g in await admin.groups()] == ["g-a", "g-b", "g-c"]
    await admin.delete_topic("a")
    assert await admin.topics(names=["a"]) == []


@pytest.mark.parametrize(
    "topic",
    [
        Topic("", 1, 1),
        Topic("a b", 1, 1),
        Topic("%DLQ%x", 1, 1),
        Topic("x", 0, 0),
        Topic("x", -1, 1),
        Topic("x", 1, 1025),
    ],
)
async def test_bad_topics(subject: Subject, topic: Topic) -> None:
    with pytest.raises(errors.InvalidArgument):
        await subject.admin.put_topic(topic)
    assert await subject.admin.topics() == []


async def test_groups_and_modes(subject: Subject) -> None:
    admin = subject.admin
    await admin.put_topic(Topic("orders", 2, 2))
    assert (await admin.put_group(Group("billing", max_reconsume_times=2))).created
    assert not (await admin.put_group(Group("billing", fifo=True))).created
    assert await admin.groups() == [Group("billing", fifo=True)]
    for bad in (Group("bad name"), Group("g", max_reconsume_times=-1), Group("g", 1001)):
        with pytest.raises(errors.InvalidArgument):
            await admin.put_group(bad)

    default = ConsumeModeSetting("billing", "orders", ConsumeMode.PULL, 0, False)
    assert await admin.consume_mode("billing", "orders") == default
    pop = await admin.set_consume_mode("billing", "orders", mode=ConsumeMode.POP)
    assert pop == ConsumeModeSetting("billing", "orders", ConsumeMode.POP, 0, True)
    assert await admin.consume_modes("billing") == [pop]
    with pytest.raises(errors.NotFound) as unknown_group:
        await admin.set_consume_mode("nobody", "orders", mode=ConsumeMode.POP)
    assert unknown_group.value.reason == "UNKNOWN_GROUP"
    with pytest.raises(errors.NotFound) as unknown_topic:
        await admin.consume_mode("billing", "nope")
    assert unknown_topic.value.reason == "UNKNOWN_TOPIC"
    with pytest.raises(errors.InvalidArgument):
        await admin.set_consume_mode(
            "billing", "orders", mode=ConsumeMode.POP, pop_share_queue_num=-1
        )
    with pytest.raises(errors.NotFound):
        await admin.consume_modes("nobody")

    await admin.delete_group("billing")
    assert await admin.consume_modes() == []
    with pytest.raises(errors.NotFound):
        await admin.delete_group("billing")


async def test_members_and_info(subject: Subject) -> None:
    admin = subject.admin
    epoch = (await admin.info()).config_epoch
    stored = await admin.set_members([Member("z", "h:2"), Member(BROKER, "pod:8081")])
    assert stored == [Member(BROKER, "pod:8081"), Member("z", "h:2")]
    assert await admin.members() == stored
    info = await admin.info()
    assert (info.cluster, info.broker_name, info.client_endpoint) == (CLUSTER, BROKER, "pod:8081")
    assert info.config_epoch == epoch
    assert info.revive_queue_num == REVIVE_QUEUES
    for bad in ([Member("a", "h")], [Member("a", "h:1"), Member("a", "h:2")], [Member("", "h:1")]):
        with pytest.raises(errors.InvalidArgument):
            await admin.set_members(bad)
    assert await admin.members() == stored
    assert await admin.serving()


async def test_offsets_and_offset_table_scan(subject: Subject) -> None:
    admin = subject.admin
    await admin.put_topic(Topic("orders", 2, 2))
    await admin.put_group(Group("billing"))
    await _seed_offset(subject, group="billing", topic="orders", queue_id=1, queue_offset=0)
    offsets = await admin.offsets("billing")
    assert [(q.topic, q.queue_id, q.committed_queue_offset) for q in offsets.queues] == [
        ("orders", 0, None),
        ("orders", 1, 0),
    ]
    with pytest.raises(errors.NotFound):
        await admin.offsets("nobody")
    with pytest.raises(errors.NotFound):
        await admin.offsets("billing", ["nope"])

    await _seed_offset(subject, group="billing", topic="orders", queue_id=0, queue_offset=0)
    pages = [p async for p in admin.scan_offsets(page_size=1)]
    assert [p.resume_after for p in pages] == [
        OffsetTableKey("billing", "orders", 0),
        OffsetTableKey("billing", "orders", 1),
    ]
    assert [p.end_of_table for p in pages] == [False, True]
    rest = [p async for p in admin.scan_offsets(start_after=pages[0].resume_after)]
    assert [r.key.queue_id for p in rest for r in p.rows] == [1]
    with pytest.raises(errors.NotFound):
        async for _ in admin.scan_offsets(group="nobody"):
            pass


async def test_revive_log_scan_bounds(subject: Subject) -> None:
    admin = subject.admin
    [page] = [p async for p in admin.scan_revive_log(0)]
    assert (page.records, page.end_of_log, page.next_queue_offset) == ((), True, 0)
    with pytest.raises(errors.NotFound):
        async for _ in admin.scan_revive_log(REVIVE_QUEUES):
            pass
    with pytest.raises(errors.OutOfRange):
        async for _ in admin.scan_revive_log(0, from_queue_offset=1):
            pass
    stats = await admin.revive_stats()
    assert [q.revive_queue_id for q in stats.queues] == list(range(REVIVE_QUEUES))


async def test_hand_over_without_replication_is_refused(subject: Subject) -> None:
    """A broker that is not a replica (no ``--replica-name``) has no set to hand over: both
    implementations refuse with REPLICATION_OFF (the operator then restarts it as always)."""
    with pytest.raises(errors.FailedPrecondition) as refused:
        await subject.admin.hand_over("broker-0-r1")
    assert refused.value.reason == "REPLICATION_OFF"
    assert "replication is off" in refused.value.message
