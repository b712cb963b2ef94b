"""Traffic through the official ``rocketmq-python-client``: a producer and PushConsumers.

Why: the story's claims are about what clients see. One producer thread sends numbered bodies
at a bounded rate and records every send the broker acknowledged; healthy PushConsumers
record every body they consume and ack it; one **hung** PushConsumer takes messages and never
finishes them (no ack, no nack) while the client keeps heartbeating, the way a stuck worker
does. ``Tally`` answers the loss question: every acknowledged send must be consumed by a
healthy consumer at least once (duplicates are allowed: delivery is at least once).

Proxy: the official client has no proxy setting of its own; gRPC reads ``grpc_proxy`` from
the environment when the client makes each channel, so on kind (where the host reaches pods
only through the proxy pod) ``e2e/kind/proxy_tunnel.py`` sets it for the whole process.

Bounds: the producer stops after ``max_messages`` or ``max_s``; the hung listener gives up
its messages (FAILURE, so a nack, never an ack) when ``stop`` releases it.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
)

HUNG_HOLD_LIMIT_S = 900  # a hung listener is released by stop(); this only bounds a leak
STARTUP_ATTEMPTS = 3  # a consumer that cannot start is started again (Traffic._start_consumer)
SHUTDOWN_LIMIT_S = 30.0  # for all consumers at once: see Traffic._shutdown


def configuration(endpoints: str) -> Any:
    """``endpoints``: ``host:port`` or several joined with ``;`` (the client's bootstrap)."""
    return ClientConfiguration(endpoints, Credentials(), request_timeout=5)


@dataclass
class Tally:
    """What was sent (acknowledged or not) and what each consumer got, thread-safe."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    acked: dict[bytes, str] = field(default_factory=dict)  # body -> message id
    ack_times: list[float] = field(default_factory=list)  # time.monotonic() of each, in order
    failed_sends: list[str] = field(default_factory=list)
    consumed: dict[bytes, int] = field(default_factory=dict)  # healthy consumers only
    held: set[bytes] = field(default_factory=set)  # taken by the hung consumer

    def sent(self, body: bytes, message_id: str) -> None:
        with self.lock:
            self.acked[body] = message_id
            self.ack_times.append(time.monotonic())

    def send_failed(self, body: bytes, error: str) -> None:
        with self.lock:
            self.failed_sends.append(f"{body.decode()}: {error}")

    def got(self, body: bytes) -> None:
        with self.lock:
            self.consumed[body] = self.consumed.get(body, 0) + 1

    def hold(self, body: bytes) -> None:
        with self.lock:
            self.held.add(body)

    def longest_pause(self, after: float) -> tuple[float, float] | None:
        """The longest time between two acknowledged sends, the later one after ``after``
        (a monotonic time), and when it ended, relative to ``after``: how long the producer
        could not get a send acknowledged across a disruption at ``after``."""
        with self.lock:
            times = list(self.ack_times)
        pauses = [(b - a, b - after) for a, b in itertools.pairwise(times) if b > after]
        return max(pauses) if pauses else None

    def missing(self) -> list[bytes]:
        """Acknowledged sends no healthy consumer has consumed yet."""
        with self.lock:
            return sorted(b for b in self.acked if b not in self.consumed)

    def describe(self) -> str:
        c = self.counts()
        return (
            f"{c['acked']} sent ({c['failed_sends']} failed), {c['consumed']} consumed "
            f"({c['redelivered']} redelivered), the hung consumer stuck on {c['held_by_hung']}"
        )

    def counts(self) -> dict[str, int]:
        with self.lock:
            return {
                "acked": len(self.acked),
                "failed_sends": len(self.failed_sends),
                "consumed": len(self.consumed),
                "redelivered": sum(n - 1 for n in self.consumed.values()),
                "held_by_hung": len(self.held),
            }


class _Recording(MessageListener):  # type: ignore[misc]
    def __init__(self, tally: Tally) -> None:
        self._tally = tally

    def consume(self, message: Any) -> Any:
        self._tally.got(bytes(message.body))
        return ConsumeResult.SUCCESS


class _Hung(MessageListener):  # type: ignore[misc]
    """Takes a message and sits on it until released; then gives it back (FAILURE = nack)."""

    def __init__(self, tally: Tally) -> None:
        self._tally = tally
        self.release = threading.Event()

    def consume(self, message: Any) -> Any:
        self._tally.hold(bytes(message.body))
        self.release.wait(HUNG_HOLD_LIMIT_S)
        return ConsumeResult.FAILURE


class Producing(threading.Thread):
    """Numbered sends at ``rate_per_s`` until ``stopping``, ``max_messages`` or ``max_s``;
    paused while ``resumed`` is clear. Each acknowledged send goes to ``tally``."""

    def __init__(
        self, endpoints: str, topic: str, tally: Tally, *, rate_per_s: float, max_messages: int,
        max_s: float,
    ) -> None:  # fmt: skip
        super().__init__(name="e2e-producer", daemon=True)
        self._endpoints, self._topic, self._tally = endpoints, topic, tally
        self._interval_s = 1.0 / rate_per_s
        self._max_messages, self._max_s = max_messages, max_s
        self.stopping = threading.Event()
        self.resumed = threading.Event()
        self.resumed.set()
        self.started_up = threading.Event()
        self.error: BaseException | None = None
        self.sent = 0

    def run(self) -> None:
        try:
            producer = Producer(configuration(self._endpoints), (self._topic,))
            producer.startup()
        except Exception as exc:  # noqa: BLE001 -- reported by Traffic.start
            self.error = exc
            self.started_up.set()
            return
        self.started_up.set()
        try:
            self._loop(producer)
        finally:
            producer.shutdown()

    def _loop(self, producer: Any) -> None:
        deadline = time.monotonic() + self._max_s
        due = time.monotonic()  # when the next send is due: the rate holds whatever a send takes
        while not self.stopping.is_set() and self.sent < self._max_messages:
            if time.monotonic() >= deadline:
                return
            if not self.resumed.wait(0.5):
                continue
            body = f"e2e-{self.sent:06d}".encode()
            self.sent += 1
            message = Message()
            message.topic = self._topic
            message.body = body
            message.tag = "e2e"
            try:
                receipt = producer.send(message)
            except Exception as exc:  # noqa: BLE001 -- an unacknowledged send is data here
                self._tally.send_failed(body, f"{type(exc).__name__}: {exc}")
            else:
                self._tally.sent(body, str(receipt.message_id))
            # pacing, not synchronisation; a late send moves the schedule (never a burst)
            due = max(due + self._interval_s, time.monotonic())
            self.stopping.wait(due - time.monotonic())


@dataclass
class Traffic:
    """A running producer, ``healthy`` recording PushConsumers and one hung PushConsumer."""

    endpoints: str
    topic: str
    group: str
    healthy: int = 2
    hung: bool = True  # and one hung PushConsumer
    rate_per_s: float = 10.0
    max_messages: int = 18_000
    max_s: float = 1_800.0
    tally: Tally = field(default_factory=Tally)
    _consumers: list[Any] = field(default_factory=list)
    _hung: _Hung | None = None
    _hung_consumer: Any = None
    stuck_shutdowns: list[str] = field(default_factory=list)
    startup_failures: list[str] = field(default_factory=list)
    _producing: Producing | None = None

    def start(self) -> None:
        """Consumers first (so the group has members), then the producer."""
        subscription = {self.topic: FilterExpression("*")}
        for _ in range(self.healthy):
            self._start_consumer(_Recording(self.tally), subscription, cache=1024, threads=4)
        if self.hung:
            self._hung = _Hung(self.tally)
            # One consumption thread and a tiny cache: it holds about one message per queue
            # it is given and then stops receiving, like a worker stuck on its first task.
            self._hung_consumer = self._start_consumer(self._hung, subscription, cache=1, threads=1)
        self._producing = Producing(
            self.endpoints, self.topic, self.tally, rate_per_s=self.rate_per_s,
            max_messages=self.max_messages, max_s=self.max_s,
        )  # fmt: skip
        self._producing.start()
        self._producing.started_up.wait(60)
        if self._producing.error is not None:
            raise self._producing.error

    def _start_consumer(
        self, listener: Any, subscription: dict[str, Any], *, cache: int, threads: int
    ) -> Any:
        """A started PushConsumer. One that cannot start (its first settings did not come
        within the client's 10 s: a Service created seconds ago, not yet routed by
        kube-proxy on a loaded node) is shut down and started again, as its pod would be
        restarted; up to STARTUP_ATTEMPTS times, each failure kept in ``startup_failures``."""
        attempt = 0
        while True:
            attempt += 1
            consumer = PushConsumer(
                configuration(self.endpoints), self.group, listener, subscription,
                max_cache_message_count=cache, consumption_thread_count=threads,
            )  # fmt: skip
            try:
                consumer.startup()
            except Exception as exc:  # the client's own types, or its cleanup's AttributeError
                self.startup_failures.append(f"attempt {attempt}: {type(exc).__name__}: {exc}")
                with contextlib.suppress(Exception):  # leave no heartbeating half-consumer
                    consumer.shutdown()
                if attempt >= STARTUP_ATTEMPTS:
                    raise
                continue
            self._consumers.append(consumer)
            return consumer

    def release_hung(self) -> int:
        """The hung consumer gives its messages back (nack) and leaves; how many it held.

        On a real cluster this runs before brokers are replaced: the official client sends a
        nack (and an ack) to the endpoint the message came from and retries a failed one
        again and again, so a nack aimed at a pod that no longer exists keeps a consumption
        thread (and the consumer's shutdown) busy for many minutes.
        """
        held = len(self.tally.held)
        if self._hung is not None:
            self._hung.release.set()
        if self._hung_consumer is not None:
            self._consumers.remove(self._hung_consumer)
            self._shutdown((self._hung_consumer, "the hung consumer"))
            self._hung_consumer = None
        return held

    def _shutdown(self, *named: tuple[Any, str]) -> None:
        """``consumer.shutdown()`` of each, all at once and bounded by one SHUTDOWN_LIMIT_S: one
        still retrying an ack then is left to its (daemon) thread and recorded in
        ``stuck_shutdowns`` (one after the other, two stuck consumers cost the story 2 min)."""
        threads = [
            (threading.Thread(target=c.shutdown, name=f"shutdown {what}", daemon=True), what)
            for c, what in named
        ]
        for thread, _ in threads:
            thread.start()
        deadline = time.monotonic() + SHUTDOWN_LIMIT_S
        for thread, what in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                self.stuck_shutdowns.append(
                    f"{what}: shutdown still waiting after {SHUTDOWN_LIMIT_S:.0f}s"
                )

    def pause(self) -> None:
        if self._producing is not None:
            self._producing.resumed.clear()

    def resume(self) -> None:
        if self._producing is not None:
            self._producing.resumed.set()

    def stop_producing(self) -> None:
        if self._producing is not None:
            self._producing.stopping.set()
            self._producing.resumed.set()
            self._producing.join(30)

    def stop(self) -> None:
        """Stop everything; the hung consumer lets go of its messages (nack) first."""
        self.stop_producing()
        if self._hung is not None:
            self._hung.release.set()
        self._shutdown(
            *(
                (c, "the hung consumer" if c is self._hung_consumer else f"consumer {number}")
                for number, c in enumerate(self._consumers)
            )
        )
        self._consumers.clear()
