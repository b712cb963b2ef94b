"""The official client produces, receives and acks; properties survive the round trip."""

from __future__ import annotations

import time

from tests.integration.broker import officialclient as oc
from tests.integration.broker.conftest import GROUP, TOPIC
from tests.integration.broker.harness import WITH_FRONT, BrokerProcess

BROKER_MODES = WITH_FRONT  # also behind popfront (conftest)


def test_send_receive_ack(broker: BrokerProcess) -> None:
    with oc.producer(broker.endpoint, [TOPIC]) as producer:
        sent = {
            producer.send(
                oc.message(
                    TOPIC,
                    f"body-{i}".encode(),
                    tag="paid",
                    keys=[f"k{i}"],
                    properties={"n": str(i)},
                )
            ).message_id: i
            for i in range(20)
        }
    assert len(sent) == 20
    if broker.front:  # popfront encoded them (popbroker.grpc.frontappends)
        assert broker.front_metric('popfleet_front_sent_messages_total{encoding="record"}') == 20
    with oc.simple_consumer(broker.endpoint, GROUP, TOPIC) as consumer:
        got = oc.receive_until(consumer, 20)
        assert sorted(m.message_id for m in got) == sorted(sent)
        for m in got:
            i = sent[m.message_id]
            assert m.body == f"body-{i}".encode()
            assert m.tag == "paid"
            assert m.keys == {f"k{i}"}
            assert m.properties == {"n": str(i)}
            assert m.delivery_attempt == 1
            assert not m.corrupted
            assert m.topic == TOPIC
            consumer.ack(m)
        started = time.monotonic()
        assert consumer.receive(16, 15) == []
        assert time.monotonic() - started < 10  # long polling ended before the client deadline


def test_tag_filter(broker: BrokerProcess) -> None:
    with oc.producer(broker.endpoint, [TOPIC]) as producer:
        for i in range(10):
            producer.send(oc.message(TOPIC, f"{i}".encode(), tag="red" if i % 2 else "blue"))
    with oc.simple_consumer(broker.endpoint, GROUP, TOPIC, tag="red") as consumer:
        got = oc.receive_until(consumer, 5)
        assert sorted(int(m.body) for m in got) == [1, 3, 5, 7, 9]
        for m in got:
            consumer.ack(m)
        assert consumer.receive(16, 15) == []
