"""``--metrics-listen``: scrape every role before and after official-client traffic.

Each role process serves ``/metrics`` (``popbroker all``: one endpoint with
everything; three roles: store, popack and revive each their own). The test
drives traffic with the official client and polls the scrapes until the
numbers it caused are there (deadlines, never sleeps):

  * 3 sends, 3 pops, 1 ack, 1 change-invisible counted as ``OK``; a route
    lookup of an unknown topic counted as ``TOPIC_NOT_FOUND``;
  * the message made visible again after 1 s is revived into the retry topic
    (``retry_messages{group}`` = 1) while the third stays in flight
    (``inflight_messages{group,topic}`` = 1; ``--pop-ck-stay-ms 100`` writes
    its checkpoint to the revive log at once);
  * a receive parked on an empty topic shows as a parked long poll;
  * the store's flush histogram counted the flushes of that traffic;
  * the group's consumer lag on the topic is exported, and is 0 once all three were popped.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from rocketmq import Producer

from tests.integration.broker import officialclient as oc
from tests.integration.broker.conftest import GROUP, GROUPS, TOPIC, TOPICS
from tests.integration.broker.harness import MODES, BrokerProcess, endpoint_role

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
ROLES = {"all": ("all",), "roles": ("store", "popack", "revive")}
ROLES |= {f"{mode}-front": roles for mode, roles in list(ROLES.items())}
POLL_DEADLINE_S = 60.0
LAG = "popfleet_broker_consumer_lag_messages"
Observed = tuple[BrokerProcess, dict[str, Path]]


@pytest.fixture(params=MODES)
def observed(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[BrokerProcess, dict[str, Path]]]:
    mode = str(request.param)
    port_files = {role: tmp_path / f"{role}.metrics-port" for role in ROLES[mode]}
    extra = {
        role: ["--metrics-listen", "127.0.0.1:0", "--metrics-port-file", str(path)]
        for role, path in port_files.items()
    }
    extra[endpoint_role(mode)] += ["--pop-ck-stay-ms", "100"]
    process = BrokerProcess.start(
        tmp_path / "broker", mode=mode, topics=TOPICS, groups=GROUPS, extra_args=extra
    )
    try:
        yield process, port_files
    finally:
        process.stop()
        print(process.logs())


def wait_for_port_files(port_files: dict[str, Path]) -> None:
    """Each role writes its metrics port once it serves."""
    deadline = time.monotonic() + POLL_DEADLINE_S
    while not all(path.exists() for path in port_files.values()):
        assert time.monotonic() < deadline, "metrics port files not written"
        time.sleep(0.02)


def scrape(port_files: dict[str, Path]) -> Samples:
    """Every sample of every role, by (name, labels)."""
    samples: Samples = {}
    for path in port_files.values():
        port = int(path.read_text().strip())
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def wait_for(port_files: dict[str, Path], check: Callable[[Samples], bool], what: str) -> Samples:
    deadline = time.monotonic() + POLL_DEADLINE_S
    while True:
        samples = scrape(port_files)
        if check(samples):
            return samples
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not seen within {POLL_DEADLINE_S} s")
        time.sleep(0.1)  # polling interval of a condition with a deadline


@pytest.mark.timeout(240)
def test_traffic_moves_the_numbers(observed: Observed) -> None:
    broker, port_files = observed
    wait_for_port_files(port_files)
    before = scrape(port_files)
    requests, messages = "popfleet_broker_requests_total", "popfleet_broker_messages_total"
    assert value(before, messages, op="send", code="OK") == 0
    flushes_before = value(before, "popfleet_store_flush_seconds_count")

    with oc.producer(broker.endpoint, [TOPIC]) as producer:
        for i in range(3):
            producer.send(oc.message(TOPIC, f"m{i}".encode()))
    unknown = Producer(oc.configuration(broker.endpoint), ("no-such-topic",))
    unknown.startup()
    unknown.shutdown()
    with oc.simple_consumer(broker.endpoint, GROUP, TOPIC, await_duration_s=2) as consumer:
        got = oc.receive_until(consumer, 3, invisible_s=60, timeout_s=30, batch=1)
        assert len(got) == 3
        consumer.ack(got[0])
        consumer.change_invisible_duration(got[1], 1)  # revived to the retry topic in 1 s

    after = wait_for(
        port_files,
        lambda s: (
            value(s, "popfleet_broker_retry_messages", group=GROUP) == 1
            and value(s, "popfleet_broker_inflight_messages", group=GROUP, topic=TOPIC) == 1
            and (LAG, frozenset({("group", GROUP), ("topic", TOPIC)})) in s
        ),
        "one message revived into the retry topic, one in flight, the group's lag exported",
    )
    # all three were popped: what is in flight or revived is not lag (POP commits on pop)
    assert value(after, LAG, group=GROUP, topic=TOPIC) == 0
    assert value(after, messages, op="send", code="OK") == 3
    assert value(after, messages, op="pop", code="OK") == 3
    assert value(after, messages, op="ack", code="OK") == 1
    assert value(after, messages, op="change_invisible", code="OK") == 1
    assert value(after, requests, rpc="SendMessage", code="OK") == 3
    assert value(after, requests, rpc="AckMessage", code="OK") == 1
    assert value(after, requests, rpc="QueryRoute", code="TOPIC_NOT_FOUND") >= 1
    assert value(after, "popfleet_broker_dlq_messages", group=GROUP) == 0
    assert value(after, "popfleet_store_flush_seconds_count") > flushes_before
    assert ("popfleet_broker_revive_lag_messages", frozenset({("revive_queue", "0")})) in after
    assert value(after, "popfleet_metrics_refresh_errors_total") == 0
    # every role times its garbage collections; traffic makes young ones for sure
    assert value(after, "popfleet_broker_gc_pause_seconds_count", generation="0") > 0
    reads = "popfleet_broker_store_reads_total"
    if "popack" in port_files:  # the roles shape reads the store's files (--data-dir)
        for role in ("popack", "revive"):
            own = scrape({role: port_files[role]})
            assert value(own, reads, path="direct") > value(own, reads, path="store") >= 0, role
    else:
        assert not [name for name, _ in after if name == reads]


@pytest.mark.timeout(120)
def test_a_parked_receive_is_counted_while_it_waits(
    observed: Observed,
) -> None:
    broker, port_files = observed
    wait_for_port_files(port_files)
    # Parked for 6 s: long enough to be scraped while it waits on a loaded machine, short
    # enough that the test does not sit out a 20-s poll.
    with oc.simple_consumer(broker.endpoint, "other", "mixed", await_duration_s=6) as consumer:
        done = threading.Event()

        def receive() -> None:
            consumer.receive(1, 15)
            done.set()

        waiter = threading.Thread(target=receive)
        waiter.start()
        try:
            wait_for(
                port_files,
                lambda s: value(s, "popfleet_broker_parked_long_polls") == 1,
                "a parked receive",
            )
        finally:
            waiter.join(timeout=40)
        assert done.is_set()
    after = scrape(port_files)
    assert value(after, "popfleet_broker_parked_long_polls") == 0
    assert (
        value(
            after, "popfleet_broker_requests_total", rpc="ReceiveMessage", code="MESSAGE_NOT_FOUND"
        )
        >= 1
    )
