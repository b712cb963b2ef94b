"""Steps only a real cluster can show: kubelets, NetworkPolicy, evictions, rolling upgrades.

Why: the local testbed has no container runtime, no network between pods and no policy
enforcement, so these run on kind only (``scenario.KIND``), between the pod-deletion step and
the no-loss check, with the story's traffic running throughout:

* **NetworkPolicy**: a pod that is neither the operator nor an audit cannot open a broker's
  admin port, while the same pod does reach the client port (so the refusal is the policy,
  not the network). The operator and the e2e proxy pod (labelled like the operator) reach it
  all along: every other step goes through them.
* **PodDisruptionBudget**: one voluntary eviction of a broker pod is admitted, a second one
  while the first pod is still away is refused by the budget (HTTP 429); the evicted broker
  comes back with its members and modes.
* **liveness**: a broker's store process is frozen (SIGSTOP from the node, where the pod's
  PID namespace is visible); the kubelet's gRPC liveness probe fails and restarts the
  container by itself; the broker serves again and keeps its modes.
* **rolling upgrade**: the BrokerCluster's image is changed under traffic; pods are replaced
  one at a time (never two brokers away at once), each Ready and re-applied before the
  next, and the group is still POP on every broker afterwards.

The no-loss step that follows checks every acknowledged send against what was consumed.
"""

from __future__ import annotations

import json
import time

from popfleet_e2e import brokers, conditions, steps, waits
from popfleet_e2e.access import ClusterAccess, Obj, ScenarioError
from popfleet_e2e.steps import CLUSTER, GROUP, REPLICAS, Story

STRANGER = "e2e-stranger"

# Runs in the stranger pod: waits until the client port of every broker answers (a new pod is
# admitted by the policy engine a few seconds after it starts), then tries each admin port.
PROBE = """
import json, socket, sys, time
hosts, client_port, admin_port = sys.argv[1].split(","), int(sys.argv[2]), int(sys.argv[3])
def dial(host, port, timeout):
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return "open"
    except OSError as exc:
        return type(exc).__name__
client = {}
deadline = time.monotonic() + 60
for h in hosts:
    while (r := dial(h, client_port, 2)) != "open" and time.monotonic() < deadline:
        time.sleep(1)
    client[h] = r
admin = {h: dial(h, admin_port, 5) for h in hosts}
print(json.dumps({"client": client, "admin": admin}))
"""


def hung_consumer_released(story: Story) -> str:
    """The hung consumer nacks what it holds and leaves, while its brokers still exist.

    The official client sends an ack or nack to the endpoint (pod IP) the message came from
    and retries a failed one for many minutes: a nack sent after the rolling upgrade replaced
    that pod would keep the consumer from shutting down. Its messages come back to the
    healthy consumers after the nack's invisible time; the no-loss step checks they do.
    """
    held = story.running_traffic().release_hung()
    return f"the hung consumer gave back its {held} held message(s) (nack) and left"


def _hosts(access: ClusterAccess) -> tuple[list[str], str]:
    """The brokers' hosts and their (advertised) client port."""
    listed = brokers.current(access, CLUSTER)
    return [b.endpoint.rsplit(":", 1)[0] for b in listed], listed[0].endpoint.rsplit(":", 1)[1]


def _stranger_pod(image: str, hosts: list[str], client_port: str) -> Obj:
    ports = [client_port, str(brokers.ADMIN_PORT)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": STRANGER, "labels": {"app.kubernetes.io/name": STRANGER}},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 10001},
            "containers": [
                {
                    "name": "probe",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["python", "-c", PROBE, ",".join(hosts), *ports],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def network_policy_enforced(story: Story) -> str:
    """A stranger pod reaches every broker's client port and none of their admin ports."""
    access = story.access
    image = access.get("brokercluster", CLUSTER)["spec"].get("image")
    hosts, client_port = _hosts(access)
    access.kubectl("delete", "pod", STRANGER, "-n", access.namespace, "--ignore-not-found")
    access.kubectl("apply", "-n", access.namespace, "-f", "-",
                   stdin=json.dumps(_stranger_pod(str(image), hosts, client_port)))  # fmt: skip
    try:
        phase = waits.until(
            lambda: _finished(access.get("pod", STRANGER)), timeout_s=180,
            what=f"the {STRANGER} pod to finish",
        )  # fmt: skip
        out = access.kubectl("logs", STRANGER, "-n", access.namespace).strip().splitlines()
    finally:
        access.kubectl("delete", "pod", STRANGER, "-n", access.namespace, "--wait=false")
    if phase != "Succeeded" or not out:
        raise ScenarioError(f"{STRANGER} ended {phase}: {out}")
    seen = json.loads(out[-1])
    client_closed = {h: r for h, r in seen["client"].items() if r != "open"}
    admin_open = [h for h, r in seen["admin"].items() if r == "open"]
    if client_closed or admin_open:
        raise ScenarioError(
            f"want every client port open and every admin port closed to a stranger: {seen}"
        )
    return (
        f"stranger pod: client port open on {len(hosts)} brokers, admin port refused "
        f"({', '.join(sorted(set(seen['admin'].values())))}); operator and proxy pod reach it"
    )


def _finished(pod: Obj) -> str | None:
    phase = (pod.get("status") or {}).get("phase")
    return str(phase) if phase in ("Succeeded", "Failed") else None


def _evict(access: ClusterAccess, pod: str) -> tuple[bool, str]:
    """Ask the Eviction API for ``pod``; (admitted, what the API server said)."""
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": access.namespace},
    }
    path = f"/api/v1/namespaces/{access.namespace}/pods/{pod}/eviction"
    try:
        return True, access.kubectl("create", "--raw", path, "-f", "-", stdin=json.dumps(body))
    except ScenarioError as exc:
        return False, str(exc)


def _budget(access: ClusterAccess) -> Obj:
    pdbs = access.items("poddisruptionbudget")
    if len(pdbs) != 1:
        raise ScenarioError(f"want one PodDisruptionBudget, found {len(pdbs)}")
    return pdbs[0]


def _back_to_normal(story: Story, *, sent_before: int, why: str) -> None:
    """The cluster Ready with every broker, members and POP/1 everywhere, sends going on."""
    access, traffic = story.access, story.running_traffic()
    conditions.wait(
        access, "brokercluster", CLUSTER, "Ready", timeout_s=240,
        also=lambda obj: steps.ready_with(obj, REPLICAS), what=f"{REPLICAS} brokers ready {why}",
    )  # fmt: skip
    waits.until(
        lambda: steps.members_everywhere(access, brokers.current(access, CLUSTER)),
        timeout_s=90, what=f"every broker lists every member {why}",
    )  # fmt: skip
    conditions.wait(access, "consumergroup", GROUP, "ModeApplied", timeout_s=120)
    steps.wait_modes(access, "POP", 1, timeout_s=90, what=f"{GROUP} POP/1 on every broker {why}")
    waits.until(
        lambda: len(traffic.tally.acked) >= sent_before + 50, timeout_s=120,
        what=f"50 more acknowledged sends {why}", seen=traffic.tally.describe,
    )  # fmt: skip


def disruption_budget_holds(story: Story) -> str:
    """One eviction admitted, a second refused by the budget while the first is away."""
    access = story.access
    waits.until(
        lambda: (_budget(access).get("status") or {}).get("disruptionsAllowed") == 1,
        timeout_s=120, what="the budget to allow exactly one disruption",
    )  # fmt: skip
    first, second = f"{CLUSTER}-0", f"{CLUSTER}-2"
    sent_before = len(story.running_traffic().tally.acked)
    story.logbook.collect_brokers(access, [first])
    admitted, said = _evict(access, first)
    if not admitted:
        raise ScenarioError(f"the first eviction ({first}) was refused: {said}")
    admitted, said = _evict(access, second)
    if admitted:
        raise ScenarioError(f"a second eviction ({second}) was admitted while {first} is away")
    if "disruption budget" not in said:
        raise ScenarioError(f"the second eviction failed, but not by the budget: {said}")
    _back_to_normal(story, sent_before=sent_before, why=f"after evicting {first}")
    return f"{first} evicted; {second} refused by the budget (429); {first} back with POP/1"


def _container_status(pod: Obj, container: str) -> Obj:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == container:
            return dict(status)
    raise ScenarioError(f"{pod['metadata']['name']} has no status for container {container}")


def _liveness_kills(access: ClusterAccess, pod: str) -> list[str]:
    events = access.items("event")
    return [
        str(e.get("message", ""))
        for e in events
        if (e.get("involvedObject") or {}).get("name") == pod
        and e.get("reason") == "Unhealthy"
        and "Liveness probe failed" in str(e.get("message", ""))
    ]


def container_pid(access: ClusterAccess, pod: str, container: str) -> int:
    """The host PID of ``pod``'s running ``container``, from the node's CRI (crictl)."""
    if access.node_exec is None:
        raise ScenarioError("this cluster gives no way to run a command on its node")
    ids = access.node_exec(
        ["crictl", "ps", "-q", "--name", f"^{container}$",
         "--label", f"io.kubernetes.pod.name={pod}",
         "--label", f"io.kubernetes.pod.namespace={access.namespace}"],
    ).split()  # fmt: skip
    if len(ids) != 1:
        raise ScenarioError(f"want one running {container} container in {pod}, crictl says {ids}")
    info = json.loads(access.node_exec(["crictl", "inspect", ids[0]]))
    return int(info["info"]["pid"])


def liveness_restarts_a_frozen_broker(story: Story) -> str:
    """SIGSTOP a store process; the kubelet's liveness probe restarts it; the broker recovers."""
    access = story.access
    if access.node_exec is None:
        raise ScenarioError("this cluster gives no way to run a command on its node")
    pod, container = f"{CLUSTER}-2", "store"
    before = int(_container_status(access.get("pod", pod), container).get("restartCount", 0))
    sent_before = len(story.running_traffic().tally.acked)
    story.logbook.collect_brokers(access, [pod])
    pid = container_pid(access, pod, container)
    frozen_at = time.monotonic()
    access.node_exec(["kill", "-STOP", str(pid)])

    def restarted() -> bool:
        status = _container_status(access.get("pod", pod), container)
        return int(status.get("restartCount", 0)) > before and bool(status.get("ready"))

    waits.until(restarted, timeout_s=240, what=f"the kubelet to restart {pod}/{container}")
    took = time.monotonic() - frozen_at
    kills = _liveness_kills(access, pod)
    if not kills:
        raise ScenarioError(f"{pod}/{container} restarted, but no 'Liveness probe failed' event")
    _back_to_normal(story, sent_before=sent_before, why=f"after {pod}'s liveness restart")
    return f"{pod}/{container} frozen; liveness restart after {took:.0f}s; POP/1 kept"


def _broker_pods(access: ClusterAccess) -> dict[str, Obj]:
    selector = f"app.kubernetes.io/name=popfleet-broker,app.kubernetes.io/instance={CLUSTER}"
    return {p["metadata"]["name"]: p for p in access.items("pod", selector=selector)}


def _runs(pod: Obj, image: str) -> bool:
    return all(c.get("image") == image for c in pod["spec"]["containers"]) and steps.pod_ready(pod)


def rolling_upgrade_under_traffic(story: Story) -> str:
    """A new broker image: pods replaced one at a time, each Ready and re-applied."""
    access = story.access
    if access.next_broker_image is None:
        raise ScenarioError("this cluster has no second broker image to upgrade to")
    image = access.next_broker_image
    sent_before = len(story.running_traffic().tally.acked)
    story.logbook.collect_brokers(access)
    access.merge_patch("brokercluster", CLUSTER, {"spec": {"image": image}})
    worst = 0
    order: list[str] = []

    def upgraded() -> bool:
        nonlocal worst
        pods = _broker_pods(access)
        away = REPLICAS - sum(1 for p in pods.values() if steps.pod_ready(p))
        worst = max(worst, away)
        for name, pod in sorted(pods.items()):
            if _runs(pod, image) and name not in order:
                order.append(name)
        return len(pods) == REPLICAS and all(_runs(p, image) for p in pods.values())

    waits.until(upgraded, timeout_s=600, interval_s=1.0, what=f"every broker pod on {image}")
    if worst > 1:
        raise ScenarioError(f"{worst} brokers were away at once during the rolling upgrade")
    _back_to_normal(story, sent_before=sent_before, why="after the rolling upgrade")
    return f"{' -> '.join(order)} on {image}, at most {worst} away at a time; POP/1 kept"
