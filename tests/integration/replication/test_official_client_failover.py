"""The official Python client through a broker set's failover (issue 18).

Three broker pods in processes (``brokerset``), their Lease on the testbed's
kube-apiserver, SYNC replication with minInSyncReplicas 2, the client on the set's service
address only. The producer sends and records every send the broker acknowledged; a
consumer pops some, acks most and leaves the rest in flight; then the leader's pod is lost
(every process SIGKILLed). The producer goes on, retrying as an application does, until
another pod leads; afterwards the consumer gets every acknowledged message, and the ones
that were in flight when the leader died come back: through revive after their invisible
time when their checkpoint was durable, else popped again from their queue (the committed
offset never passes a checkpoint that is not durable).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from rocketmq.v5.util.misc import Misc

from popbroker.store.api import GroupConfig, TopicConfig
from popfleet_testbed import cluster
from tests import eventloops
from tests.integration.broker import officialclient as oc
from tests.integration.replication.brokerset import Pod, broker_set

Misc._Misc__LOCAL_IP = "127.0.0.1"  # the client's local-IP probe stays on loopback

TOPIC, GROUP = "orders", "billing"
BEFORE, AFTER = 60, 60  # messages sent before and after the leader's pod is lost
INVISIBLE_S = 10
WAIT_S = 90.0  # bound of every wait below


def _leader(pods: dict[str, Pod]) -> str:
    deadline = time.monotonic() + WAIT_S
    while True:
        leading = [name for name, pod in pods.items() if pod.leader_file.exists()]
        if len(leading) == 1:
            return leading[0]
        assert time.monotonic() < deadline, f"leader files: {leading}"
        time.sleep(0.1)  # bounded poll of a state the replicas' rounds move


def _send(producer: Any, i: int, acked: dict[str, str]) -> float:
    """Send message ``i`` until the broker acknowledges it (bounded); the seconds it took.
    Only acknowledged sends are recorded: they are the ones that must not be lost."""
    started = time.monotonic()
    while True:
        try:
            receipt = producer.send(oc.message(TOPIC, b"m%d" % i, keys=[f"k{i}"]))
        except Exception:  # noqa: BLE001 - any failure: the application retries, bounded
            assert time.monotonic() - started < WAIT_S, f"message {i} never acknowledged"
            time.sleep(0.2)  # an application's retry pause
            continue
        acked[f"k{i}"] = receipt.message_id
        return time.monotonic() - started


def _receive(consumer: Any) -> list[Any]:
    """One receive; a failed one (the client's connection to a lost pod) is an empty one."""
    try:
        return list(consumer.receive(16, INVISIBLE_S))
    except Exception:  # noqa: BLE001 - the caller's loop is bounded and retries
        return []


def _key(message: Any) -> str:
    (key,) = message.keys
    return str(key)


def test_the_official_client_loses_no_acknowledged_message_when_the_leader_pod_dies(
    testbed: cluster.Cluster, testbed_namespace: str, tmp_path: Path
) -> None:
    with (
        eventloops.current_event_loop(),
        broker_set(
            tmp_path,
            namespace=testbed_namespace,
            kubeconfig=testbed.kubeconfig,
            topics=[TopicConfig(TOPIC, read_queue_nums=4, write_queue_nums=4)],
            groups=[GroupConfig(GROUP, max_reconsume_times=16)],
        ) as (pods, service),
    ):
        try:
            first = _leader(pods)
            acked: dict[str, str] = {}
            with (
                oc.producer(service.address, [TOPIC]) as producer,
                oc.simple_consumer(service.address, GROUP, TOPIC) as consumer,
            ):
                for i in range(BEFORE):
                    _send(producer, i, acked)
                popped = oc.receive_until(consumer, 20, invisible_s=INVISIBLE_S, timeout_s=WAIT_S)
                assert len(popped) >= 20
                for message in popped[5:]:
                    consumer.ack(message)
                in_flight = {_key(m) for m in popped[:5]}  # popped, never acked

                pods[first].kill()  # the leader's pod is lost
                waits = [_send(producer, BEFORE + i, acked) for i in range(AFTER)]
                second = _leader({n: p for n, p in pods.items() if n != first})
                print(f"leader {first} lost; {second} leads; first send after took {waits[0]:.2f}s")
                assert waits[0] < 15  # the bound on a failover

                consumed: dict[str, int] = {}  # key -> highest delivery attempt seen
                deadline = time.monotonic() + WAIT_S
                while not (set(acked) - {_key(m) for m in popped[5:]}) <= set(consumed):
                    assert time.monotonic() < deadline, (
                        f"missing {sorted(set(acked) - set(consumed))[:10]}, in flight "
                        f"{ {k: consumed.get(k) for k in in_flight} }"
                    )
                    for message in _receive(consumer):
                        key = _key(message)
                        consumed[key] = max(consumed.get(key, 0), message.delivery_attempt)
                        with contextlib.suppress(Exception):  # not acked: it comes again
                            consumer.ack(message)
            assert set(acked) <= set(consumed) | {_key(m) for m in popped}
            assert in_flight <= set(consumed)  # delivered again, not lost
            again = {k: consumed[k] for k in in_flight}
            print(f"in flight at the kill, delivered again (key: attempt): {again}")
        except BaseException:
            for pod in pods.values():
                print(pod.logs())
            raise
