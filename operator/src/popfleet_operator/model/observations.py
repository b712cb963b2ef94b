"""What the operator saw: broker pods and what each broker answered (plain values).

``clients`` produce these; ``planning`` and ``status`` turn them into decisions and status.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BrokerPod:
    """One broker pod as the Kubernetes API shows it."""

    name: str
    ordinal: int
    pod_ip: str | None
    ready: bool
    terminating: bool = False

    def endpoint(self, port: int) -> str | None:
        return f"{self.pod_ip}:{port}" if self.pod_ip else None


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A broker pod and what its admin API said (``reachable`` False: it said nothing)."""

    pod: BrokerPod
    reachable: bool
    config_epoch: str = ""
    serving: bool = False
    error: str = ""


@dataclass(frozen=True, slots=True)
class BrokerOutcome:
    """One broker's read-back after a Topic or ConsumerGroup fan-out round.

    ``synced`` only when the broker, read back after any write, matches the spec exactly.
    """

    broker: str
    synced: bool
    reachable: bool = True
    config_epoch: str = ""
    queues: int | None = None
    perm: str = ""
    mode: str = ""
    pop_share_queue_num: int | None = None
    missing_topics: tuple[str, ...] = ()
    error: str = ""
    wrote: bool = False
