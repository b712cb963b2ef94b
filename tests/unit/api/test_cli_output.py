"""popfleet-admin's output and its fan-out, against in-memory brokers."""

from __future__ import annotations

import json

from popfleet_api import cli, errors
from popfleet_api.client import BrokerAdminApi
from popfleet_api.cliformat import BrokerResult, Section, render_json, render_table
from popfleet_api.models import ConsumeMode, Group, Topic
from popfleet_api.testing import InMemoryBrokerAdmin


def test_table_has_a_row_per_broker_and_a_failed_row() -> None:
    results = [
        BrokerResult("h:1", sections=[Section("topics", [{"topic": "orders", "read_queues": 4}])]),
        BrokerResult("h:22", error=errors.Unavailable("connection refused", reason="")),
    ]
    lines = render_table(results).splitlines()
    assert lines[0].split() == ["BROKER", "STATUS", "TOPIC", "READ-QUEUES"]
    assert lines[1].split() == ["h:1", "ok", "orders", "4"]
    assert lines[2].split()[:3] == ["h:22", "FAILED", "UNAVAILABLE:"]
    assert lines[2].endswith("connection refused")


def test_json_document() -> None:
    results = [
        BrokerResult("h:1", sections=[Section("groups", [{"group": "g", "fifo": True}])]),
        BrokerResult("h:2", error=errors.NotFound("nope", reason="UNKNOWN_GROUP")),
    ]
    document = json.loads(render_json(results))
    assert document == {
        "ok": False,
        "brokers": [
            {"broker": "h:1", "ok": True, "result": {"groups": [{"group": "g", "fifo": True}]}},
            {
                "broker": "h:2",
                "ok": False,
                "error": {
                    "code": "NOT_FOUND",
                    "reason": "UNKNOWN_GROUP",
                    "retriable": False,
                    "message": "nope",
                },
            },
        ],
    }


def test_empty_results_and_sections() -> None:
    assert render_table([BrokerResult("h:1", sections=[Section("topics")])]).split() == [
        "BROKER",
        "STATUS",
        "h:1",
        "ok",
    ]


async def test_run_tries_every_broker_and_closes_each_client() -> None:
    brokers = {name: InMemoryBrokerAdmin(name) for name in ("a:1", "b:1", "c:1")}
    brokers["b:1"].unreachable = True
    args = cli.build_parser().parse_args(
        ["--broker", "a:1", "topic", "create", "orders", "--queues", "3", "--type", "fifo"]
    )

    def factory(target: str) -> BrokerAdminApi:
        return brokers[target]

    results = await cli.run(list(brokers), cli._action(args), client_factory=factory)
    assert [(r.broker, r.ok) for r in results] == [("a:1", True), ("b:1", False), ("c:1", True)]
    assert all(b.closed for b in brokers.values())
    assert results[1].error is not None
    assert results[1].error.retriable
    for name in ("a:1", "c:1"):
        [topic] = await brokers[name].topics()
        assert (topic.name, topic.read_queue_nums, topic.message_type.value) == (
            "orders",
            3,
            "FIFO",
        )
    brokers["b:1"].unreachable = False
    assert await brokers["b:1"].topics() == []  # the failed broker was not changed


async def test_offsets_rows_carry_lag_in_time() -> None:
    broker = InMemoryBrokerAdmin("a:1")
    await broker.put_topic(Topic("orders", 1, 1))
    broker.set_queue_bounds("orders", 0, low=0, high=10)
    broker.commit_offset(group="billing", topic="orders", queue_id=0, queue_offset=4)
    args = cli.build_parser().parse_args(["--broker", "a:1", "offsets", "billing"])
    [result] = await cli.run(["a:1"], cli._action(args), client_factory=lambda _: broker)
    [section] = result.sections
    assert section.rows == [
        {
            "topic": "orders",
            "queue": 0,
            "min": 0,
            "max": 10,
            "committed": 4,
            "lag": 6,
            "lag_ms": None,
            "in_flight": None,
            "oldest_store_ms": None,
        }
    ]


async def test_a_queue_never_committed_has_no_lag() -> None:
    """Burrow's and kafka-lag-exporter's rule, as the audit applies it: no commit, no lag."""
    broker = InMemoryBrokerAdmin("a:1")
    await broker.put_topic(Topic("orders", 2, 2))
    await broker.put_group(Group("billing"))
    await broker.set_consume_mode("billing", "orders", mode=ConsumeMode.POP)
    broker.set_queue_bounds("orders", 0, low=0, high=10)
    broker.set_queue_bounds("orders", 1, low=2, high=7)
    broker.commit_offset(group="billing", topic="orders", queue_id=0, queue_offset=4)
    args = cli.build_parser().parse_args(["--broker", "a:1", "offsets", "billing"])
    [result] = await cli.run(["a:1"], cli._action(args), client_factory=lambda _: broker)
    [section] = result.sections
    assert [(row["queue"], row["committed"], row["lag"]) for row in section.rows] == [
        (0, 4, 6),
        (1, None, None),
    ]
    offsets = await broker.offsets("billing")
    assert [q.unconsumed_messages for q in offsets.queues] == [6, 5]


async def test_hand_over_names_the_successor_and_the_term_or_the_refusal() -> None:
    broker = InMemoryBrokerAdmin("a:1")
    args = cli.build_parser().parse_args(
        ["--broker", "a:1", "hand-over", "--successor", "rep-r1-0"]
    )
    [refused] = await cli.run(["a:1"], cli._action(args), client_factory=lambda _: broker)
    assert isinstance(refused.error, errors.FailedPrecondition)
    assert refused.error.reason == "REPLICATION_OFF"
    broker.followers = ("rep-r1-0", "rep-r2-0")
    [result] = await cli.run(["a:1"], cli._action(args), client_factory=lambda _: broker)
    assert result.sections == [Section("hand-over", [{"successor": "rep-r1-0", "term": 1}])]
    assert broker.hand_overs == ["rep-r1-0"]
