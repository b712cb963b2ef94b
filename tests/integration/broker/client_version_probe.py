"""Run by another interpreter (a venv with another client version): start, send, receive, ack.

    python client_version_probe.py ENDPOINT TOPIC GROUP

Prints one JSON line ``{"version": ..., "sent": id, "received": id, "attempt": n}``;
exits non-zero on any failure. Imports nothing from popfleet: it sees only the
client package of the interpreter running it. The local-IP probe is
pre-seeded so nothing but loopback is touched.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from rocketmq.v5.util.misc import Misc

Misc._Misc__LOCAL_IP = "127.0.0.1"

from rocketmq import (  # noqa: E402 - after the probe is seeded
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)


def main() -> int:
    endpoint, topic, group = sys.argv[1:4]
    config = ClientConfiguration(endpoint, Credentials())
    producer = Producer(config, (topic,))
    producer.startup()  # 5.1.1 blocks here until the Telemetry settings reply
    message = Message()
    message.topic = topic
    message.body = b"version probe"
    sent = producer.send(message).message_id
    producer.shutdown()
    consumer = SimpleConsumer(config, group, {topic: FilterExpression()}, await_duration=3)
    consumer.startup()
    received: list[Any] = []
    deadline = time.monotonic() + 20
    while not received and time.monotonic() < deadline:
        received = consumer.receive(16, 15)
    for m in received:
        consumer.ack(m)
    consumer.shutdown()
    version = getattr(Misc, "SDK_VERSION", None)
    if version is None:
        from rocketmq.v5.util.version import SDK_VERSION  # noqa: PLC0415 - 5.1.2 moved it

        version = SDK_VERSION
    print(
        json.dumps(
            {
                "version": version,
                "sent": sent,
                "received": [m.message_id for m in received],
                "attempt": [m.delivery_attempt for m in received],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
