"""Pod status as the kubelet reports it, computed from the runtime's state (pure).

Why: controllers read nothing but this — a StatefulSet waits for ``Ready``, a Job for
``phase: Succeeded``, ``kubectl rollout status`` for ``containerStatuses[].ready`` — so the
fields must mean what they mean in a cluster.

Conditions owned here: ``PodReadyToStartContainers`` (volumes and IP set up), ``Initialized``
(init containers done), ``ContainersReady`` and ``Ready`` (every container ready; ``Ready``
also needs each ``readinessGates`` condition True). Others (``PodScheduled`` from the
scheduler, ``DisruptionTarget``, gates) are copied from the pod unchanged, because the status
is sent as a JSON merge patch, in which lists are replaced whole.
``lastTransitionTime`` only moves when a condition's status flips (kept in ``PodRun``).
"""

from __future__ import annotations

from typing import Any

from popfleet_testbed import runtime

Obj = dict[str, Any]

OWNED = ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")


def container_status(cr: runtime.ContainerRun, *, waiting_message: str = "") -> Obj:
    state = cr.state
    if waiting_message and "waiting" in state and not cr.runs:
        state = {"waiting": {"reason": "ContainerCreating", "message": waiting_message}}
    status: Obj = {
        "name": cr.name,
        "image": cr.spec.get("image", ""),
        "imageID": f"testbed://{cr.spec.get('image', '')}",
        "ready": cr.ready,
        "started": cr.started,
        "restartCount": cr.restart_count,
        "state": state,
        "lastState": cr.last_state,
    }
    if cr.rec is not None:
        status["containerID"] = f"testbed://{cr.rec.pid}"
    elif "terminated" in state:
        status["containerID"] = state["terminated"].get("containerID", "")
    return status


def _condition(pr: runtime.PodRun, kind: str, ok: bool, reason: str, now: str) -> Obj:
    status = "True" if ok else "False"
    previous = pr.transitions.get(kind)
    when = previous[1] if previous and previous[0] == status else now
    pr.transitions[kind] = (status, when)
    cond: Obj = {"type": kind, "status": status, "lastTransitionTime": when, "lastProbeTime": None}
    if not ok and reason:
        cond["reason"] = reason
    return cond


def pod_status(pr: runtime.PodRun, *, host_ip: str = "127.0.0.1") -> Obj:
    """The ``status`` object for a JSON merge patch of the pod's status subresource."""
    now = runtime.now_rfc3339()
    phase = pr.phase()
    terminal = phase in ("Succeeded", "Failed")
    containers_ready = bool(pr.containers) and all(c.ready for c in pr.containers)
    existing = pr.pod.get("status", {}).get("conditions") or []
    gates_ok = all(
        any(c.get("type") == g["conditionType"] and c.get("status") == "True" for c in existing)
        for g in pr.pod["spec"].get("readinessGates") or []
    )
    not_ready_reason = "PodCompleted" if terminal else "ContainersNotReady"
    conditions = [c for c in existing if c.get("type") not in OWNED]
    conditions += [
        _condition(pr, "PodReadyToStartContainers", pr.prepared, "", now),
        _condition(pr, "Initialized", pr.initialized, "ContainersNotInitialized", now),
        _condition(pr, "ContainersReady", containers_ready, not_ready_reason, now),
        _condition(pr, "Ready", containers_ready and gates_ok, not_ready_reason, now),
    ]
    status: Obj = {
        "phase": phase,
        "conditions": conditions,
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "startTime": pr.start_time,
        "containerStatuses": [
            container_status(c, waiting_message=pr.waiting_message) for c in pr.containers
        ],
    }
    if pr.prepared:
        status["podIP"] = pr.ip
        status["podIPs"] = [{"ip": pr.ip}]
    if pr.init:
        status["initContainerStatuses"] = [
            container_status(c, waiting_message=pr.waiting_message) for c in pr.init
        ]
    if pr.waiting_message and not pr.prepared:
        status["message"] = pr.waiting_message
    return status


def comparable(status: Obj) -> Obj:
    """``status`` without transition timestamps, to decide whether a patch is needed."""
    copy = dict(status)
    copy["conditions"] = [
        {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status["conditions"]
    ]
    return copy
