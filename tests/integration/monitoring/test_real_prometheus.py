"""A real Prometheus scrapes a real broker under official-client traffic (issue 19).

* Every dashboard panel's query, with the variables Grafana would fill in, and every
  selector of every alert and recording rule of the chart return series. The queries that
  read the operator's or a replicated set's metrics cannot here (no operator, one store):
  they are listed, by what they read, and nothing else is left out.
* The lag alert stays quiet for a healthy group under steady traffic, fires for a hung
  consumer in PULL mode (its queue stalls while the topic is written) and resolves after the
  group is switched to POP (the others drain the queue); the figures are printed.
* With nothing written after one burst the lag is flat: the growth alert stays quiet and
  PopfleetConsumerStalled (lag, and no committed offset moving) fires instead, until POP.
  Three official ``PushConsumer`` processes on a 2-queue topic, as in
  ``tests/integration/broker/test_hung_consumer.py``; the chart's rules rendered with a 20 s
  trend window and a 10 s hold, Prometheus scraping and evaluating every second.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from rocketmq.v5.exception import BadRequestException

from bench.peers.pushfleet import PushFleet
from popbroker.store.api import GroupConfig, Permission, TopicConfig
from popfleet_e2e import observe
from tests.integration.broker import officialclient as oc
from tests.integration.broker.consumemodes import (
    MARGIN_S,
    REFRESH_S,
    make_readable,
    running_fleet,
    set_mode,
    wait_for_assignments,
    wait_until_popping,
)
from tests.integration.broker.harness import BrokerProcess
from tests.integration.monitoring import prometheus
from tests.integration.monitoring.prometheus import Target

POD = "demo-0"
TOPIC, GROUP = "orders", "billing"
# Read only where an operator runs or a broker set replicates: the kind e2e's queries.
ELSEWHERE = (
    "popfleet_operator_",
    "popfleet_replication_",
    f'job="{prometheus.NAMESPACE}/{prometheus.RELEASE}-operator"',
)
FAST_RULES = ("monitoring.prometheusRule.lagWindow=20s", "monitoring.prometheusRule.lagFor=10s")
SEND_EVERY_S = 0.05  # 20 messages/s: one queue's share is what the hung consumer leaves
MAX_SENDS = 6000  # bound of the producer loop (5 min at that rate)
ALERT = "PopfleetConsumerLagGrowing"
STALLED = "PopfleetConsumerStalled"
BURST = 80  # one burst, then nothing: 40 per queue, more than the hung consumer's cache
HEALTHY_S = 35.0  # longer than the 20 s window and the 10 s hold together


def variables(rate_interval: str) -> dict[str, str]:
    return {
        "$__rate_interval": rate_interval,
        "$namespace": prometheus.NAMESPACE,
        "$cluster": "demo",
        "$pod": POD,
        "$group": GROUP,
    }


def dashboard_queries() -> list[tuple[str, str, str]]:
    """(dashboard, panel, query with the variables filled in) of every panel."""
    return observe.dashboard_queries(variables("5s"))


def elsewhere(expr: str) -> bool:
    return any(prefix in expr for prefix in ELSEWHERE)


@contextlib.contextmanager
def observed_broker(
    work_dir: Path, *, mode: str, topic_perm: Permission
) -> Iterator[tuple[BrokerProcess, list[Target]]]:
    """A broker with its admin API and /metrics; the Prometheus targets of its processes."""
    port_file = work_dir / "all.metrics-port"
    extra = {"all": ["--metrics-listen", "127.0.0.1:0", "--metrics-port-file", str(port_file),
                     "--pop-ck-stay-ms", "100"]}  # fmt: skip
    broker = BrokerProcess.start(
        work_dir / "broker",
        mode=mode,
        topics=[TopicConfig(TOPIC, 2, 2, perm=topic_perm)],
        groups=[GroupConfig(GROUP)],
        admin=True,
        extra_args=extra,
    )
    try:
        deadline = time.monotonic() + 60
        while not port_file.exists():
            assert time.monotonic() < deadline, "the broker's metrics port file was not written"
            time.sleep(0.05)
        targets = [Target(int(port_file.read_text().strip()), POD, "all")]
        if broker.front:
            targets.append(Target(broker.front_metrics_port, POD, "front"))
        yield broker, targets
    finally:
        broker.stop()
        print(broker.logs())


@pytest.mark.timeout(300)
def test_every_dashboard_query_and_rule_selector_returns_series(tmp_path: Path) -> None:
    rules = prometheus.render_rules()
    queries = dashboard_queries()
    selectors = observe.rule_selectors(rules)
    with (
        observed_broker(tmp_path, mode="all-front", topic_perm=Permission.READ_WRITE) as (
            broker,
            targets,
        ),
        prometheus.running(tmp_path / "prometheus", targets, rules=rules) as server,
    ):
        server.wait(lambda: set(server.targets_up().values()) == {1.0},
                    what="every target up", timeout_s=30)  # fmt: skip
        with oc.producer(broker.endpoint, [TOPIC]) as producer:
            for i in range(6):
                producer.send(oc.message(TOPIC, f"m{i}".encode()))
        with oc.simple_consumer(broker.endpoint, GROUP, TOPIC, await_duration_s=2) as consumer:
            got = oc.receive_until(consumer, 6, invisible_s=60, timeout_s=30, batch=2)
            consumer.ack(got[0])
            consumer.change_invisible_duration(got[1], 1)  # revived to the retry topic
            stale = got[2].receipt_handle
            consumer.change_invisible_duration(got[2], 60)
            got[2]._Message__receipt_handle = stale  # what a stale client would send
            with pytest.raises(BadRequestException):  # a refused entry: counted not OK
                consumer.ack(got[2])
            # got[2:] stay in flight; 3 more sent and not popped are the group's lag
            with oc.producer(broker.endpoint, [TOPIC]) as producer:
                for i in range(3):
                    producer.send(oc.message(TOPIC, f"late{i}".encode()))

            def empty() -> list[str]:
                wanted = [q for _, _, q in queries if not elsewhere(q)]
                wanted += [s for s in selectors if not elsewhere(s)]
                return [q for q in wanted if not server.query(q)]

            try:
                server.wait(lambda: not empty(), what="series for every query", timeout_s=90)
            except AssertionError as e:
                raise AssertionError(f"{e}; still empty: {empty()}") from e

            # KEDA's query reads the group's lag: the 3 sent after the pops
            (keda,) = observe.keda_queries()
            server.wait(lambda: [float(s["value"][1]) for s in server.query(keda)] == [3.0],
                        what="the KEDA example's query = 3", timeout_s=30)  # fmt: skip

    left_out = sorted(
        {q for _, _, q in queries if elsewhere(q)} | set(filter(elsewhere, selectors))
    )
    print("left to the kind e2e (operator, replication):", *left_out, sep="\n  ")


@dataclass
class PullGroup:
    """A broker, a Prometheus evaluating the fast rules, and three PushConsumers of the
    group in PULL mode, each queue owned by one of them (``owners``)."""

    broker: BrokerProcess
    server: prometheus.Prometheus
    fleet: PushFleet
    owners: dict[int, str]


@contextlib.contextmanager
def pull_group(tmp_path: Path) -> Iterator[PullGroup]:
    rules = prometheus.render_rules(*FAST_RULES)
    with (
        observed_broker(tmp_path, mode="all", topic_perm=Permission.WRITE) as (broker, targets),
        prometheus.running(tmp_path / "prometheus", targets, rules=rules) as server,
        running_fleet(
            broker,
            tmp_path / "consumers",
            topic=TOPIC,
            group=GROUP,
            names=("c0", "c1", "c2"),
            processing_ms=5,
            threads=4,
            max_cache=32,  # with 4 the client waits 1 s whenever its cache is full
        ) as fleet,  # fmt: skip
    ):
        make_readable(broker, TOPIC)
        pull = wait_for_assignments(fleet, lambda a: sum(len(q) for q in a.values()) == 2,
                                    what="both queues assigned (PULL)")  # fmt: skip
        owners = {queue: name for name, queues in pull.items() for queue in queues}
        wait_until_popping(broker, group=GROUP, topic=TOPIC)
        yield PullGroup(broker, server, fleet, owners)


def switch_to_pop(group: PullGroup, alert: str) -> tuple[float, float]:
    """Switch the group to POP; seconds until its lag is 0 and until ``alert`` is gone."""
    set_mode(group.broker, group=GROUP, topic=TOPIC, mode="POP", share=0)
    switched_at = time.monotonic()
    server = group.server
    drained_s = server.wait(lambda: lag(server) == 0, what="lag 0 after the switch",
                            timeout_s=REFRESH_S + 8 * MARGIN_S)  # fmt: skip
    server.wait(lambda: not server.alerts(alert), what=f"{alert} resolved",
                timeout_s=REFRESH_S + 8 * MARGIN_S)  # fmt: skip
    return drained_s, time.monotonic() - switched_at


def firing_alert(server: prometheus.Prometheus, alert: str, *, timeout_s: float) -> float:
    """Seconds until ``alert`` fires, for this group and topic only."""
    fired_s = server.wait(lambda: firing(server, alert), what=f"{alert} firing",
                          timeout_s=timeout_s)  # fmt: skip
    (found,) = [a for a in server.alerts(alert) if a["state"] == "firing"]
    assert {k: found["labels"][k] for k in ("group", "topic", "cluster")} == {
        "group": GROUP, "topic": TOPIC, "cluster": "demo"}  # fmt: skip
    return fired_s


@pytest.mark.timeout(420)
def test_a_hung_pull_consumer_fires_the_lag_alert_and_pop_resolves_it(tmp_path: Path) -> None:
    with pull_group(tmp_path) as group, producing(group.broker) as sent:
        server = group.server
        # Healthy, under the same traffic, for a whole window and hold: never fires.
        healthy_until = time.monotonic() + HEALTHY_S
        while time.monotonic() < healthy_until:
            assert not server.alerts(ALERT), "the lag alert is pending for a healthy group"
            time.sleep(0.5)  # polling Prometheus over a fixed observation window
        group.fleet.hang(group.owners[0])
        hung_at = time.monotonic()
        fired_s = firing_alert(server, ALERT, timeout_s=120)
        lag_at_switch = lag(server)
        assert lag_at_switch > 0
        hung_for_s = time.monotonic() - hung_at
        drained_s, resolved_s = switch_to_pop(group, ALERT)
        assert sent() > 0
    print(
        f"figures: hang -> {ALERT} firing {fired_s:.1f} s (window 20 s + for 10 s), "
        f"lag at the switch {lag_at_switch:.0f}, switch -> lag 0 {drained_s:.1f} s, "
        f"switch -> resolved {resolved_s:.1f} s, hang -> switch {hung_for_s:.1f} s, "
        f"{sent()} sent"
    )


@pytest.mark.timeout(420)
def test_a_group_that_commits_nothing_while_it_lags_is_stalled_until_pop(
    tmp_path: Path,
) -> None:
    """Nothing written after one burst: the lag is flat, so only the stall alert can see the
    hung consumer; the healthy one's queue is drained and commits nothing more either."""
    with pull_group(tmp_path) as group:
        server = group.server
        group.fleet.hang(group.owners[0])
        with oc.producer(group.broker.endpoint, [TOPIC]) as producer:
            for i in range(BURST):
                producer.send(oc.message(TOPIC, f"b{i}".encode()))
        fired_s = firing_alert(server, STALLED, timeout_s=120)
        lag_at_switch = lag(server)
        assert lag_at_switch > 0
        assert not firing(server, ALERT)  # a flat lag is no trend
        drained_s, resolved_s = switch_to_pop(group, STALLED)
    print(
        f"figures: burst -> {STALLED} firing {fired_s:.1f} s (for 10 s, window 20 s), "
        f"lag at the switch {lag_at_switch:.0f}, switch -> lag 0 {drained_s:.1f} s, "
        f"switch -> resolved {resolved_s:.1f} s"
    )


def firing(server: prometheus.Prometheus, alert: str) -> bool:
    return any(a["state"] == "firing" for a in server.alerts(alert))


def lag(server: prometheus.Prometheus) -> float:
    found = server.query(f'popfleet:consumer_lag_messages:sum{{group="{GROUP}", topic="{TOPIC}"}}')
    return sum(float(s["value"][1]) for s in found) if found else float("nan")


@contextlib.contextmanager
def producing(broker: BrokerProcess) -> Iterator[Callable[[], int]]:
    """One official-client send every SEND_EVERY_S (bounded by MAX_SENDS) until the block
    ends; yields the count so far."""
    stop = threading.Event()
    count = 0
    failure: list[Exception] = []

    def run() -> None:
        nonlocal count
        try:
            with oc.producer(broker.endpoint, [TOPIC]) as producer:
                while count < MAX_SENDS and not stop.wait(SEND_EVERY_S):
                    producer.send(oc.message(TOPIC, f"p{count}".encode()))
                    count += 1
        except Exception as e:  # noqa: BLE001 - re-raised by the test, not lost in the thread
            failure.append(e)

    thread = threading.Thread(target=run, name="producer", daemon=True)
    thread.start()
    try:
        yield lambda: count
    finally:
        stop.set()
        thread.join(timeout=30)
    if failure:
        raise failure[0]
