"""Run in a child interpreter: the official client over TLS (``tls_enable=True``).

    GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=ca.pem python tls_probe.py ENDPOINT TOPIC GROUP TLS

The client has no option for a CA (fact sheet §2): it trusts gRPC's default
roots, which that environment variable replaces, in this process only. ``TLS``
is ``1`` or ``0`` (the client's ``tls_enable``). Prints one JSON line
``{"sent": id, "received": [ids]}`` or ``{"error": "..."}``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

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
    endpoint, topic, group, tls = sys.argv[1:5]
    asyncio.set_event_loop(asyncio.new_event_loop())
    config = ClientConfiguration(endpoint, Credentials(), request_timeout=3)
    producer = Producer(config, (topic,), tls_enable=tls == "1")
    producer.startup()
    try:
        message = Message()
        message.topic = topic
        message.body = b"over tls"
        sent = producer.send(message).message_id
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        print(json.dumps({"error": str(exc)}))
        return 0
    finally:
        producer.shutdown()
    consumer = SimpleConsumer(
        config, group, {topic: FilterExpression("*")}, await_duration=2, tls_enable=tls == "1"
    )
    consumer.startup()
    received: list[str] = []
    deadline = time.monotonic() + 30
    try:
        while sent not in received and time.monotonic() < deadline:
            for got in consumer.receive(16, 15):
                received.append(got.message_id)
                consumer.ack(got)
    finally:
        consumer.shutdown()
    print(json.dumps({"sent": sent, "received": received}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
