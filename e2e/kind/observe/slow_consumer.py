"""A slow consumer for the kind KEDA step (issue 19): the official client, unmodified.

One ``PushConsumer`` (rocketmq-python-client, the version the broker image carries) of
``$GROUP`` on ``$TOPIC``, bootstrapped from ``$ENDPOINTS`` (the BrokerCluster's client
Service). Each message takes ``$PROCESSING_MS`` of simulated work on one consumption thread,
so one replica drains about 1000/PROCESSING_MS messages a second whatever the broker does:
what limits a group is how many replicas get messages. In PULL a queue belongs to one
consumer, so replicas beyond the queue count get none; in POP every replica does.

Every second it prints one line, ``consumed <total> <unix time>``: the step reads the last
line of every pod (``kubectl logs --tail=1``) to count what each replica consumed.

It runs from a ConfigMap in the broker image (``python /consumer/slow_consumer.py``), with
HOME on an emptyDir (the client writes its log under ``~/logs``).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    MessageListener,
    PushConsumer,
)

REQUEST_TIMEOUT_S = 3
MAX_CACHE = 32  # messages a replica holds ahead: a few seconds of its work, not the backlog


class Slow(MessageListener):  # type: ignore[misc]
    def __init__(self, processing_s: float) -> None:
        self.processing_s = processing_s
        self.consumed = 0
        self.lock = threading.Lock()

    def consume(self, message: Any) -> Any:
        time.sleep(self.processing_s)  # the simulated work of one message
        with self.lock:
            self.consumed += 1
        return ConsumeResult.SUCCESS


def main() -> int:
    env = os.environ
    listener = Slow(float(env.get("PROCESSING_MS", "100")) / 1000)
    consumer = PushConsumer(
        ClientConfiguration(env["ENDPOINTS"], Credentials(), request_timeout=REQUEST_TIMEOUT_S),
        env["GROUP"],
        listener,
        {env["TOPIC"]: FilterExpression()},
        max_cache_message_count=MAX_CACHE,
        consumption_thread_count=1,
    )
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    consumer.startup()
    print(f"started {consumer.client_id}", flush=True)
    while not stopping.wait(1.0):
        print(f"consumed {listener.consumed} {time.time():.3f}", flush=True)
    done = threading.Thread(target=consumer.shutdown, daemon=True)
    done.start()
    done.join(10)
    print(f"consumed {listener.consumed} {time.time():.3f}", flush=True)
    sys.stdout.flush()
    os._exit(0)  # consumption threads must not hold the exit


if __name__ == "__main__":
    sys.exit(main())
