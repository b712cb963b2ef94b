"""What the operator saw: broker pods and what each broker answered (plain values).

``clients`` produce these; ``planning`` and ``status`` turn them into decisions and status.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BrokerPod:
    """One broker pod as the Kubernetes API shows it.

    ``revision`` is the StatefulSet controller revision the pod was made from (its
    ``controller-revision-hash`` label); ``created_s`` its creation time (Unix seconds);
    ``problem`` a container that cannot run (``"store: ErrImagePull"``), "" when none.
    """

    name: str
    ordinal: int
    pod_ip: str | None
    ready: bool
    terminating: bool = False
    revision: str = ""
    created_s: float | None = None
    problem: str = ""

    def endpoint(self, port: int) -> str | None:
        return f"{self.pod_ip}:{port}" if self.pod_ip else None


@dataclass(frozen=True, slots=True)
class StatefulSetState:
    """The broker StatefulSet as the API shows it: what the rollout rule reads.

    ``partition`` is ``spec.updateStrategy.rollingUpdate.partition`` (0 when unset);
    ``current_revision``/``update_revision`` come from ``status`` and are only meaningful
    when :attr:`status_current` (the controller has seen the latest spec); ``template_hash``
    is the operator's annotation for the pod template it last applied.
    """

    replicas: int
    partition: int
    generation: int
    observed_generation: int
    current_revision: str
    update_revision: str
    template_hash: str

    @property
    def status_current(self) -> bool:
        return bool(self.update_revision) and self.observed_generation >= self.generation


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
