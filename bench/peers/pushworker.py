"""Official PushConsumers in worker processes, for the consume-mode tests and ``bench.pull_vs_pop``.

Purpose: drive popfleet's broker-side assignment (DESIGN §3.3) the way a user
does — with the unmodified ``rocketmq-python-client`` ``PushConsumer``, which
asks ``QueryAssignment`` every :data:`ASSIGNMENT_REFRESH_S` and receives by the
assigned queue ids — and observe which consumer got which message from which
queue. Each consumer runs in its own process: the client keeps one shared
asyncio loop per process, and a hung listener must not hold the others' GIL.

Worker (``python -m bench.peers.pushworker --endpoint E --group G --topic T
--name N [--processing-ms MS] [--threads K] [--max-cache C]``):

  * stdout, one JSON object per line: ``{"event": "started", "name", "client_id"}``
    once the consumer runs; ``{"event": "consumed", "name", "queue", "retry",
    "attempt", "body", "t"}`` after each message's processing (``queue`` is the
    queue id in the receipt handle — the queue the broker popped it from;
    ``retry`` is true for a message read from the group's retry topic; ``t`` is
    wall time in seconds); ``{"event": "hanging", "name"}`` once a ``hang``
    command took effect; ``{"event": "hung", "name", "body", "t"}`` when a
    message reaches a hung listener.
  * stdin, one command per line: ``hang`` — from now on the listener never
    returns, so the consumer never acks, keeps heartbeating and keeps
    receiving until its cache (``--max-cache``) is full; ``stop`` — shut down
    (bounded) and exit.

The controller side is :mod:`bench.peers.pushfleet`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any

from rocketmq.v5.util.misc import Misc

Misc._Misc__LOCAL_IP = "127.0.0.1"

from rocketmq import (  # noqa: E402 - after the local-IP probe is seeded
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    MessageListener,
    PushConsumer,
)

ASSIGNMENT_REFRESH_S = 5.0  # PushConsumer._on_start: the assignment scan runs every 5 s (5.1.2)
HEARTBEAT_S = 10.0  # Client.__start_scheduler: a heartbeat every 10 s (5.1.2)
REQUEST_TIMEOUT_S = 3
SHUTDOWN_TIMEOUT_S = 10.0
_HANDLE_QUEUE_FIELD = (
    6  # receipt handle: start popTime invisible reviveQid topicType broker queueId
)
_HANDLE_TOPIC_TYPE_FIELD = 4


class _Output:
    """Serialised JSON lines on stdout (listener threads write concurrently)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def emit(self, **fields: Any) -> None:
        line = json.dumps(fields, separators=(",", ":"))
        with self._lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()


class _Listener(MessageListener):  # type: ignore[misc]
    def __init__(self, name: str, *, processing_s: float, output: _Output) -> None:
        self._name = name
        self._processing_s = processing_s
        self._output = output
        self.hang = threading.Event()
        self.release = threading.Event()  # set at stop so hung threads can end

    def consume(self, message: Any) -> Any:
        body = bytes(message.body).decode(errors="replace")
        if self.hang.is_set():
            self._output.emit(event="hung", name=self._name, body=body, t=time.time())
            self.release.wait()
            return ConsumeResult.FAILURE
        if self._processing_s > 0:
            time.sleep(self._processing_s)  # the simulated work of one message
        fields = str(message.receipt_handle).split()
        self._output.emit(
            event="consumed",
            name=self._name,
            queue=int(fields[_HANDLE_QUEUE_FIELD]),
            retry=int(fields[_HANDLE_TOPIC_TYPE_FIELD]) != 0,
            attempt=int(message.delivery_attempt or 1),
            body=body,
            t=time.time(),
        )
        return ConsumeResult.SUCCESS


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pushworker")
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--processing-ms", type=float, default=0.0)
    parser.add_argument("--threads", type=int, default=1, help="consumption threads")
    parser.add_argument("--max-cache", type=int, default=1024, help="max cached messages")
    return parser


def _shutdown(consumer: Any) -> None:
    done = threading.Event()

    def run() -> None:
        try:
            consumer.shutdown()
        finally:
            done.set()

    threading.Thread(target=run, daemon=True).start()
    done.wait(SHUTDOWN_TIMEOUT_S)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not args.endpoint.startswith("127."):
        raise SystemExit(f"pushworker talks to 127.0.0.0/8 only, not {args.endpoint}")
    output = _Output()
    listener = _Listener(args.name, processing_s=args.processing_ms / 1000, output=output)
    consumer = PushConsumer(
        ClientConfiguration(args.endpoint, Credentials(), request_timeout=REQUEST_TIMEOUT_S),
        args.group,
        listener,
        {args.topic: FilterExpression()},
        max_cache_message_count=args.max_cache,
        consumption_thread_count=args.threads,
    )
    consumer.startup()
    output.emit(event="started", name=args.name, client_id=consumer.client_id)
    for line in sys.stdin:
        command = line.strip()
        if command == "hang":
            listener.hang.set()
            output.emit(event="hanging", name=args.name)
        elif command == "stop":
            break
    listener.release.set()
    _shutdown(consumer)
    sys.stdout.flush()
    os._exit(0)  # hung consumption threads must not keep the process alive


if __name__ == "__main__":
    sys.exit(main())
