"""The compiled load generator's interface and the peer harness's summaries (pure parts).

What the Go binary is asked (``Phase.argv``) and what the harness takes from its
stdout (``parse_result``); the cache key of its build; medians, spreads and ratios
of the runs; the rotating order of the systems; the RocketMQ config texts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import pop_peers_loadgen as harness
from bench.peers import loadgen, rocketmq, summary


def test_the_result_is_the_one_json_line_of_its_phase() -> None:
    stdout = (
        "some log line\n"
        '{"phase":"ready","system":"popfleet","topics":["bench"]}\n'
        '{"capped":false,"messages":200,"msgs_per_s":1234.5,"phase":"produce",'
        '"seconds":0.162,"system":"popfleet"}\n'
    )
    figures = loadgen.parse_result(stdout, phase="produce")
    assert figures["msgs_per_s"] == 1234.5
    assert figures["capped"] is False
    with pytest.raises(ValueError, match="one result line"):
        loadgen.parse_result(stdout, phase="latency")
    with pytest.raises(ValueError, match="got 2"):
        loadgen.parse_result(stdout + stdout, phase="produce")


def test_a_phase_becomes_the_binary_flags() -> None:
    phase = loadgen.Phase(
        system="rocketmq", endpoint="127.0.0.1:8081", phase="redelivery", topic="rechange",
        group="grc", count=64, invisible_s=10, change_invisible_s=2, topics=("a", "b"),
    )  # fmt: skip
    argv = phase.argv()
    flags = dict(zip(argv[0::2], argv[1::2], strict=True))
    assert flags["-system"] == "rocketmq"
    assert flags["-phase"] == "redelivery"
    assert flags["-invisible-s"] == "10"
    assert flags["-change-invisible-s"] == "2"
    assert flags["-topics"] == "a,b"
    assert phase.timeout_s > phase.cap_s + phase.invisible_s
    assert loadgen.netns_prefix(None) == []
    assert loadgen.netns_prefix(42) == ["nsenter", "--net=/proc/42/ns/net", "--"]


def _run(produce: float, p50: float, cpu_us: float | None) -> dict[str, object]:
    return {
        "produce": {"msgs_per_s": produce, "cpu": {"cpu_us_per_msg": cpu_us}},
        "latency": {"p50_ms": p50, "target_rate_per_s": produce / 2},
    }


def test_medians_skip_what_a_run_lacks_and_ratios_divide_medians() -> None:
    metrics: list[summary.Metric] = [
        ("produce_msgs_per_s", ("produce", "msgs_per_s")),
        ("latency_p50_ms", ("latency", "p50_ms")),
        ("produce_cpu_us_per_msg", ("produce", "cpu", "cpu_us_per_msg")),
        ("redelivery_change_p50_ms", ("redelivery_change", "p50_ms")),
    ]
    ours = summary.medians([_run(100, 30, 300), _run(300, 10, None), _run(200, 20, 100)], metrics)
    assert ours == {
        "produce_msgs_per_s": 200.0,
        "latency_p50_ms": 20.0,
        "produce_cpu_us_per_msg": 200.0,  # the median of the two runs that have it
        "redelivery_change_p50_ms": None,
    }
    theirs = summary.medians([_run(800, 2, 50)], metrics)
    keys = [key for key, _ in metrics]
    assert summary.ratios(ours, theirs, keys) == {
        "produce_msgs_per_s": 0.25,
        "latency_p50_ms": 10.0,
        "produce_cpu_us_per_msg": 4.0,
        "redelivery_change_p50_ms": None,
    }
    assert summary.spreads([_run(100, 30, 1), _run(300, 10, 2)], metrics)["produce_msgs_per_s"] == [
        100.0,
        300.0,
    ]
    assert summary.lookup({"a": {"b": True}}, ("a", "b")) is None  # a flag is not a figure
    assert summary.ratio(1.0, 0.0) is None


def test_every_system_leads_once_in_three_runs() -> None:
    systems = ["popfleet", "rocketmq", "nats"]
    orders = [summary.rotation(systems, run) for run in range(3)]
    assert [order[0] for order in orders] == systems
    assert all(sorted(order) == sorted(systems) for order in orders)
    assert summary.rotation([], 5) == []


def test_the_harness_reports_every_popfleet_shape_against_every_peer() -> None:
    run = {
        "produce": {"msgs_per_s": 10.0},
        "latency": {"p50_ms": 5.0, "target_rate_per_s": 5.0},
    }
    faster = {**run, "produce": {"msgs_per_s": 40.0}}
    systems, ratios = harness.results(
        {"popfleet": [run], "popfleet-roles": [run], "rocketmq": [faster], "redis": [faster]}
    )
    assert set(ratios) == {
        "popfleet/rocketmq",
        "popfleet/redis",
        "popfleet-roles/rocketmq",
        "popfleet-roles/redis",
        "popfleet-roles/popfleet",
    }
    assert ratios["popfleet/rocketmq"]["produce_msgs_per_s"] == 0.25
    assert ratios["popfleet-roles/popfleet"]["produce_msgs_per_s"] == 1.0
    assert systems["redis"]["median"]["produce_msgs_per_s"] == 40.0


def test_the_front_end_shapes_are_compared_with_plain_all_and_with_each_other() -> None:
    def run(rate: float) -> dict[str, Any]:
        return {"pop_ack_4": {"msgs_per_s": rate}}

    _, ratios = harness.results(
        {
            "popfleet": [run(4.0)],
            "popfleet-front": [run(8.0)],
            "popfleet-roles-front": [run(6.0)],
            "rocketmq": [run(16.0)],
        }
    )
    assert ratios["popfleet-front/popfleet"]["pop_ack_4_msgs_per_s"] == 2.0
    assert ratios["popfleet-front/rocketmq"]["pop_ack_4_msgs_per_s"] == 0.5
    assert ratios["popfleet-roles-front/popfleet-front"]["pop_ack_4_msgs_per_s"] == 0.75
    assert "popfleet-roles/popfleet" not in ratios  # only shapes that ran


def test_rocketmq_listens_on_loopback_and_creates_what_the_phases_use(tmp_path: Path) -> None:
    broker = dict(line.split("=", 1) for line in rocketmq.broker_conf(tmp_path).splitlines())
    assert broker["brokerIP1"] == broker["bindAddress"] == "127.0.0.1"
    assert broker["namesrvAddr"] == rocketmq.NAMESRV
    assert broker["storePathRootDir"] == str(tmp_path)
    assert "bindAddress=127.0.0.1" in rocketmq.namesrv_conf()
    proxy = json.loads(rocketmq.proxy_json())
    assert proxy["proxyMode"] == "local"
    assert proxy["metricCollectorMode"] == "off"
    topics = json.loads(rocketmq.topics_json(harness.TOPICS))
    assert [t["topicName"] for t in topics] == list(harness.TOPICS)
    assert {t["attributes"]["+message.type"] for t in topics} == {"NORMAL"}
    assert [g["groupName"] for g in json.loads(rocketmq.groups_json(harness.GROUPS))] == list(
        harness.GROUPS
    )
    pom = rocketmq.pom_xml("5.3.3")
    for artifact in rocketmq.ARTIFACTS:
        assert f"<artifactId>{artifact}</artifactId><version>5.3.3</version>" in pom
