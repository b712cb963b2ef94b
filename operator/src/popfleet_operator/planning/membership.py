"""The member list the operator pushes to every broker (DESIGN §3.6).

Members are the StatefulSet's pods that have an IP and are not terminating, up to the
replica count, each advertised as ``POD_IP:client port``. Sorted by name so equal lists
compare equal whatever order the API listed the pods in.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from popfleet_api import models
from popfleet_operator.model import names
from popfleet_operator.model.observations import BrokerPod


def desired_members(pods: Iterable[BrokerPod], *, replicas: int) -> tuple[models.Member, ...]:
    members = [
        models.Member(pod.name, f"{pod.pod_ip}:{names.CLIENT_PORT}")
        for pod in pods
        if pod.pod_ip and not pod.terminating and pod.ordinal < replicas
    ]
    return tuple(sorted(members, key=lambda m: m.broker_name))


def needs_push(current: Sequence[models.Member], desired: Sequence[models.Member]) -> bool:
    return sorted(current, key=lambda m: m.broker_name) != list(desired)
