"""The operator killed in the middle of a fan-out, on a real cluster (issue 15's fault on kind).

Why: the operator is one Deployment; a node loss or an OOM kill can cut it while it is
applying a burst of Topics and ConsumerGroups to the brokers. The next pod must finish the
work by itself: every object converges, none is left in a stale condition, and its log tells
which objects it handled (kopf's ``[namespace/name]`` prefix).

The step, under the story's traffic:

1. the first half of a fleet of ``FLEET`` Topics and as many ConsumerGroups (group i reads
   topic i, PULL), labelled ``e2e.popfleet.io/fleet``, is applied at once;
2. as soon as the first object has converged, the operator's process is frozen from the node
   (SIGSTOP through the container runtime): the fan-out stops where it stands, as a kill
   would stop it. The second half is applied while it is frozen, so that something is
   always left to the next pod: a fast operator otherwise finishes a whole fleet between
   two polls (seen on CI's testbed twin of this step);
3. the operator pod is deleted with a zero grace period (the kubelet kills the frozen
   process); the Deployment starts the next pod;
4. every object of the fleet converges (``TopicSynced``/``ModeApplied`` for its generation),
   the new operator's log names at least one of them and holds no traceback;
5. the fleet is deleted (deletionPolicy Retain: the finalizers go at once) and waited for.
"""

from __future__ import annotations

import json
import time

from popfleet_e2e import logs, waits
from popfleet_e2e.access import ClusterAccess, Obj, ScenarioError
from popfleet_e2e.steps import CLUSTER, Story

FLEET = 40  # Topics, and as many ConsumerGroups
LABEL = "e2e.popfleet.io/fleet"
PREFIX = "fleet"
API = "popfleet.io/v1alpha1"
DOMAIN = {"Topic": "TopicSynced", "ConsumerGroup": "ModeApplied"}


def manifests(count: int = FLEET) -> list[Obj]:
    """``count`` Topics ``fleet-t<i>`` and ConsumerGroups ``fleet-g<i>`` (group i reads topic i)."""
    meta = {"labels": {LABEL: PREFIX}}
    topics = [
        {"apiVersion": API, "kind": "Topic", "metadata": {"name": f"{PREFIX}-t{i}", **meta},
         "spec": {"clusterRef": {"name": CLUSTER}, "queues": 2}}
        for i in range(count)
    ]  # fmt: skip
    groups = [
        {"apiVersion": API, "kind": "ConsumerGroup",
         "metadata": {"name": f"{PREFIX}-g{i}", **meta},
         "spec": {"clusterRef": {"name": CLUSTER}, "topics": [{"name": f"{PREFIX}-t{i}"}],
                  "consumeMode": "PULL"}}
        for i in range(count)
    ]  # fmt: skip
    return topics + groups


def converged(obj: Obj) -> bool:
    """The object's domain condition is True for its current generation."""
    generation = obj["metadata"].get("generation")
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == DOMAIN[obj["kind"]]:
            return bool(
                condition.get("status") == "True"
                and condition.get("observedGeneration", generation) == generation
            )
    return False


def fleet(access: ClusterAccess) -> list[Obj]:
    selector = f"{LABEL}={PREFIX}"
    return access.items("topics", selector=selector) + access.items(
        "consumergroups", selector=selector
    )


def stragglers(access: ClusterAccess) -> list[str]:
    found = fleet(access)
    if len(found) != 2 * FLEET:
        return [f"{2 * FLEET - len(found)} objects not listed yet"]
    return sorted(o["metadata"]["name"] for o in found if not converged(o))


def lines_naming(text: str, namespace: str, names: list[str]) -> list[str]:
    """Log lines carrying kopf's ``[namespace/name]`` prefix for one of ``names``."""
    tags = {f"[{namespace}/{name}]" for name in names}
    return [line for line in text.splitlines() if any(tag in line for tag in tags)]


def _operator_pods(access: ClusterAccess) -> list[Obj]:
    pods = access.items("pods", namespace=access.release_namespace, selector=logs.OPERATOR_SELECTOR)
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def _freeze(access: ClusterAccess, pod: Obj) -> None:
    """SIGSTOP the operator container's process from the node (its PID namespace)."""
    if access.node_exec is None:
        raise ScenarioError("this cluster gives no way to run a command on its node")
    name = pod["metadata"]["name"]
    ids = access.node_exec(
        ["crictl", "ps", "-q", "--name", "^operator$",
         "--label", f"io.kubernetes.pod.name={name}",
         "--label", f"io.kubernetes.pod.namespace={access.release_namespace}"],
    ).split()  # fmt: skip
    if len(ids) != 1:
        raise ScenarioError(f"want one running operator container in {name}, crictl says {ids}")
    pid = int(json.loads(access.node_exec(["crictl", "inspect", ids[0]]))["info"]["pid"])
    access.node_exec(["kill", "-STOP", str(pid)])


def _apply(access: ClusterAccess, objects: list[Obj]) -> None:
    access.kubectl(
        "apply", "-n", access.namespace, "-f", "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}),
    )  # fmt: skip


def operator_killed_mid_fan_out(story: Story) -> str:
    """Steps 1-5 of the module docstring."""
    access = story.access
    (old,) = _operator_pods(access)
    story.logbook.collect_operator(access)
    started = time.monotonic()
    everything = manifests()
    half = len(everything) // 2
    _apply(access, everything[:half])
    waits.until(
        lambda: any(converged(o) for o in fleet(access)), timeout_s=120, interval_s=0.2,
        what="the fan-out under way (one object of the fleet converged)",
    )  # fmt: skip
    _freeze(access, old)
    _apply(access, everything[half:])
    left = stragglers(access)
    if not left:
        raise ScenarioError("the operator finished the whole fleet before it was frozen")
    access.kubectl(
        "delete", "pod", old["metadata"]["name"], "-n", access.release_namespace,
        "--grace-period=0", "--force", "--wait=true", "--timeout=60s", timeout_s=90,
    )  # fmt: skip

    def replaced() -> Obj | None:
        pods = _operator_pods(access)
        fresh = [p for p in pods if p["metadata"]["uid"] != old["metadata"]["uid"]]
        ready = len(pods) == len(fresh) == 1 and any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (fresh[0].get("status") or {}).get("conditions") or []
        )
        return fresh[0] if ready else None

    new = waits.until(replaced, timeout_s=180, what="only the next operator pod, Ready")
    waits.until(
        lambda: not stragglers(access), timeout_s=240, interval_s=1.0,
        what="every object of the fleet converged", seen=lambda: str(stragglers(access)[:5]),
    )  # fmt: skip
    took = time.monotonic() - started
    names = [o["metadata"]["name"] for o in manifests()]
    pod = new["metadata"]["name"]

    def log_naming_one() -> str | None:
        text = access.kubectl("logs", pod, "-n", access.release_namespace)
        return text if lines_naming(text, access.namespace, names) else None

    text = waits.until(
        log_naming_one, timeout_s=60, what="the new operator's log naming an object [ns/name]"
    )
    if any(line.startswith("Traceback") for line in text.splitlines()):
        raise ScenarioError("the new operator's log holds a traceback")
    access.kubectl(
        "delete", "topics,consumergroups", "-n", access.namespace, "-l", f"{LABEL}={PREFIX}",
        "--wait=true", "--timeout=180s", timeout_s=200,
    )  # fmt: skip
    return (
        f"{2 * FLEET} objects: operator frozen and deleted with {len(left)} left; the next pod "
        f"converged all in {took:.0f}s from the apply; fleet deleted"
    )
