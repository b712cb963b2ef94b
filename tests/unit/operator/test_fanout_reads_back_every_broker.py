"""Fan-out against in-memory brokers: apply, read back, per-broker outcome and status."""

from __future__ import annotations

from popfleet_api import models
from popfleet_api.testing import InMemoryBrokerAdmin
from popfleet_operator.clients import fanout
from popfleet_operator.model import specs
from popfleet_operator.model.observations import BrokerOutcome, BrokerPod
from popfleet_operator.status import conditions as c
from popfleet_operator.status import epochs
from popfleet_operator.status import fanout as fanout_status

EXPECTED = ("demo-0", "demo-1", "demo-2")


def topic(queues: int = 8) -> specs.TopicSpec:
    return specs.parse_topic("orders", {"clusterRef": {"name": "demo"}, "queues": queues})


def group(mode: str = "PULL", share: int = 0) -> specs.GroupSpec:
    return specs.parse_group(
        "billing",
        {
            "clusterRef": {"name": "demo"},
            "topics": [{"name": "orders"}],
            "consumeMode": mode,
            "popShareQueueNum": share,
        },
    )


async def test_topic_created_and_confirmed_on_all(brokers: dict[str, InMemoryBrokerAdmin]) -> None:
    outcomes = await fanout.sync_topic(brokers, topic())
    assert [(o.broker, o.synced, o.queues, o.wrote) for o in outcomes] == [
        (name, True, 8, True) for name in EXPECTED
    ]
    for admin in brokers.values():
        assert [t.name for t in await admin.topics()] == ["orders"]
    again = await fanout.sync_topic(brokers, topic())
    assert not any(o.wrote for o in again)
    conditions = fanout_status.fanout_conditions(c.TOPIC_SYNCED, again, EXPECTED)
    assert (conditions[0].status, conditions[0].reason) == (True, c.ALL_BROKERS_CONFIRMED)
    assert fanout_status.synced_text(again, EXPECTED) == "3/3"


async def test_unreachable_broker_is_degraded_not_confirmed(
    brokers: dict[str, InMemoryBrokerAdmin],
) -> None:
    brokers["demo-1"].unreachable = True
    outcomes = await fanout.sync_topic(brokers, topic())
    by_name = {o.broker: o for o in outcomes}
    assert not by_name["demo-1"].reachable
    assert by_name["demo-0"].synced and by_name["demo-2"].synced
    domain, ready, reconciling, degraded = fanout_status.fanout_conditions(
        c.TOPIC_SYNCED, outcomes, EXPECTED
    )
    assert (domain.status, domain.reason) == (False, c.BROKER_UNREACHABLE)
    assert ready.status is False and reconciling.status is True
    assert (degraded.status, degraded.reason) == (True, c.BROKER_UNREACHABLE)
    assert "demo-1" in degraded.message
    brokers["demo-1"].unreachable = False
    recovered = await fanout.sync_topic(brokers, topic())
    assert all(o.synced for o in recovered)


async def test_missing_pod_keeps_the_topic_pending(brokers: dict[str, InMemoryBrokerAdmin]) -> None:
    del brokers["demo-2"]
    outcomes = await fanout.sync_topic(brokers, topic())
    domain, ready, _, degraded = fanout_status.fanout_conditions(c.TOPIC_SYNCED, outcomes, EXPECTED)
    assert ready.status is False
    assert (domain.status, domain.reason) == (False, c.PENDING_BROKERS)
    assert "demo-2" in domain.message
    assert degraded.status is False
    assert fanout_status.synced_text(outcomes, EXPECTED) == "2/3"


async def test_broker_with_more_queues_is_reported_not_shrunk(
    brokers: dict[str, InMemoryBrokerAdmin],
) -> None:
    await brokers["demo-0"].put_topic(
        models.Topic("orders", read_queue_nums=16, write_queue_nums=16)
    )
    outcomes = await fanout.sync_topic(brokers, topic(8))
    first = outcomes[0]
    assert not first.synced and first.queues == 16
    assert "never shrink" in first.error
    domain = fanout_status.fanout_conditions(c.TOPIC_SYNCED, outcomes, EXPECTED)[0]
    assert domain.reason == c.BROKER_REFUSED


async def test_mode_switch_pull_to_pop_everywhere(brokers: dict[str, InMemoryBrokerAdmin]) -> None:
    await fanout.sync_topic(brokers, topic())
    pulled = await fanout.sync_group(brokers, group())
    assert [(o.synced, o.mode, o.pop_share_queue_num) for o in pulled] == [(True, "PULL", 0)] * 3
    popped = await fanout.sync_group(brokers, group("POP", 1))
    assert [(o.synced, o.mode, o.pop_share_queue_num, o.wrote) for o in popped] == [
        (True, "POP", 1, True)
    ] * 3
    for admin in brokers.values():
        setting = await admin.consume_mode("billing", "orders")
        assert (setting.mode, setting.pop_share_queue_num) == (models.ConsumeMode.POP, 1)
    entries = fanout_status.broker_entries(popped, entry=fanout_status.group_entry)
    assert entries[0] == {
        "name": "demo-0",
        "synced": True,
        "lastError": "",
        "configEpoch": brokers["demo-0"].config_epoch,
        "mode": "POP",
        "popShareQueueNum": 1,
    }


async def test_broker_back_empty_gets_everything_again(
    brokers: dict[str, InMemoryBrokerAdmin],
) -> None:
    await fanout.sync_topic(brokers, topic())
    before = await fanout.sync_group(brokers, group("POP", 2))
    brokers["demo-1"].restart(keep_config=False)
    topics = await fanout.sync_topic(brokers, topic())
    after = await fanout.sync_group(brokers, group("POP", 2))
    assert topics[1].wrote and after[1].wrote
    assert after[1].config_epoch != before[1].config_epoch
    assert all(o.synced and o.mode == "POP" for o in after)


async def test_group_on_topic_the_broker_lacks(brokers: dict[str, InMemoryBrokerAdmin]) -> None:
    outcomes = await fanout.sync_group(brokers, group())
    assert all(o.missing_topics == ("orders",) and not o.synced for o in outcomes)
    domain = fanout_status.fanout_conditions(c.MODE_APPLIED, outcomes, EXPECTED)[0]
    assert (domain.status, domain.reason) == (False, c.TOPIC_MISSING)


async def test_backlog_and_delete(brokers: dict[str, InMemoryBrokerAdmin]) -> None:
    await fanout.sync_topic(brokers, topic(1))
    await fanout.sync_group(brokers, group())
    brokers["demo-2"].set_queue_bounds("orders", 0, low=0, high=5)
    brokers["demo-2"].commit_offset(group="billing", topic="orders", queue_id=0, queue_offset=2)
    found = await fanout.backlogs(
        brokers, lambda a: fanout.group_backlog(a, "billing", ("orders",))
    )
    assert found == {"demo-0": 0, "demo-1": 0, "demo-2": 3}
    topic_backlog = await fanout.backlogs(
        brokers, lambda a: fanout.broker_backlog(a, topic="orders")
    )
    assert topic_backlog["demo-2"] == 3
    brokers["demo-2"].commit_offset(group="billing", topic="orders", queue_id=0, queue_offset=5)
    assert await fanout.broker_backlog(brokers["demo-2"]) == 0
    brokers["demo-0"].unreachable = True
    assert await fanout.broker_backlog(brokers["demo-0"]) is None
    brokers["demo-0"].unreachable = False
    assert await fanout.delete_group(brokers, "billing") == {n: "" for n in EXPECTED}
    assert await fanout.delete_topic(brokers, "orders") == {n: "" for n in EXPECTED}
    assert await fanout.delete_topic(brokers, "orders") == {n: "" for n in EXPECTED}
    assert await brokers["demo-0"].topics() == []


async def test_observe_and_push_members(brokers: dict[str, InMemoryBrokerAdmin]) -> None:
    pods = [BrokerPod(f"demo-{i}", i, f"127.0.1.{i + 2}", ready=True) for i in range(3)]
    pods.append(BrokerPod("demo-3", 3, None, ready=False))
    brokers["demo-2"].unreachable = True
    infos = await fanout.observe(pods, brokers)
    assert [i.reachable for i in infos] == [True, True, False, False]
    assert infos[0].config_epoch == brokers["demo-0"].config_epoch
    members = (models.Member("demo-0", "127.0.1.2:8081"), models.Member("demo-1", "127.0.1.3:8081"))
    errors = await fanout.push_members(brokers, members)
    assert errors["demo-0"] == "" and "UNAVAILABLE" in errors["demo-2"]
    assert await brokers["demo-1"].members() == list(members)
    calls = len(brokers["demo-1"].calls)
    await fanout.push_members(brokers, members)
    assert brokers["demo-1"].calls[calls:] == ["members"]


def test_a_broker_without_pod_keeps_its_last_epoch() -> None:
    outcomes = [
        BrokerOutcome("demo-0", synced=True, config_epoch="a"),
    ]
    previous = [{"name": "demo-1", "configEpoch": "old"}, {"name": "demo-0", "configEpoch": "a"}]
    filled = fanout_status.with_missing(outcomes, ("demo-0", "demo-1"), previous)
    assert [(o.broker, o.synced, o.config_epoch) for o in filled] == [
        ("demo-0", True, "a"),
        ("demo-1", False, "old"),
    ]
    domain = fanout_status.fanout_conditions(c.TOPIC_SYNCED, filled, ("demo-0", "demo-1"))[0]
    assert domain.reason == c.PENDING_BROKERS


def test_an_unreachable_broker_keeps_its_last_epoch_so_a_wiped_one_is_noticed() -> None:
    previous = [{"name": "demo-0", "configEpoch": "a"}, {"name": "demo-1", "configEpoch": "old"}]
    restarting = [
        BrokerOutcome("demo-0", synced=True, config_epoch="a"),
        BrokerOutcome("demo-1", synced=False, reachable=False, error="UNAVAILABLE"),
    ]
    filled = fanout_status.with_missing(restarting, ("demo-0", "demo-1"), previous)
    assert [o.config_epoch for o in filled] == ["a", "old"]
    entries = fanout_status.broker_entries(filled, entry=fanout_status.topic_entry)
    assert epochs.epoch_changes(previous, {e["name"]: e["configEpoch"] for e in entries}) == []
    back = {"demo-0": "a", "demo-1": "new"}
    assert epochs.epoch_changes(entries, back) == [("demo-1", "old", "new")]


async def test_a_topic_backlog_counts_only_the_groups_that_consume_it(
    brokers: dict[str, InMemoryBrokerAdmin],
) -> None:
    """billing subscribes to orders only: messages on audit-log are nobody's backlog of it."""
    await fanout.sync_topic(brokers, topic(1))
    await fanout.sync_topic(
        brokers, specs.parse_topic("audit-log", {"clusterRef": {"name": "demo"}, "queues": 1})
    )
    await fanout.sync_group(brokers, group())
    brokers["demo-0"].set_queue_bounds("audit-log", 0, low=0, high=3)
    assert await fanout.broker_backlog(brokers["demo-0"], topic="audit-log") == 0
    assert await fanout.group_backlog(brokers["demo-0"], "billing", ("audit-log",)) == 0
    brokers["demo-0"].set_queue_bounds("orders", 0, low=0, high=2)
    assert await fanout.broker_backlog(brokers["demo-0"], topic="orders") == 2
    assert await fanout.broker_backlog(brokers["demo-0"]) == 2
