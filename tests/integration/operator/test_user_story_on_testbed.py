"""The user story of DESIGN §1 on the testbed, against the chart-installed operator.

One BrokerCluster for the module (brokers take seconds to start), steps in order:
the operator runs as the chart's pod under its own least-privilege RBAC -> 3 brokers
Ready -> a Topic on all 3 -> a group PULL -> POP on all 3, and the brokers' QueryAssignment
answers switch from exclusive queues to "every queue" (-1) -> a broker whose volume was
wiped gets its modes back -> scale 3 -> 4 replays everything -> 4 -> 3 is refused while the
leaving broker holds messages, and goes ahead once they are consumed -> a frozen broker
makes the Topic and the group Degraded, then they recover -> a second claim conflicts ->
pause -> an invalid spec -> deletion with Retain, and with Delete (which waits while a
backlog remains).
Every test checks that the operator logged no unexpected error or traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from popfleet_api import models
from popfleet_testbed import cluster, errors, waiting
from tests.integration.operator import clientprotocol, story

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("operator_log_clean")]

CLUSTER = "demo"


def brokers_cr(replicas: int) -> dict[str, Any]:
    return story.brokers_cr(CLUSTER, replicas)


def topic_cr(name: str, *, policy: str = "Retain") -> dict[str, Any]:
    return story.topic_cr(name, CLUSTER, policy=policy)


def group_cr(name: str, topic: str, *, policy: str = "Retain") -> dict[str, Any]:
    return story.group_cr(name, CLUSTER, topic, policy=policy)


@pytest.fixture(scope="module")
def ns(popfleet_release: cluster.Cluster) -> Iterator[str]:
    name = popfleet_release.new_namespace("story")
    popfleet_release.apply(name, brokers_cr(3), topic_cr("orders"), group_cr("billing", "orders"))
    yield name
    popfleet_release.delete_namespace(name)


def modes(pod: dict[str, Any], group: str = "billing") -> list[tuple[str, str, int, bool]]:
    settings = story.on_broker(pod, lambda admin: admin.consume_modes(group))
    return [(s.topic, s.mode.value, s.pop_share_queue_num, s.explicitly_set) for s in settings]


CONSUMERS = ("story-consumer-a", "story-consumer-b")


def assignments(pods: list[dict[str, Any]]) -> list[dict[str, list[tuple[str, int]]]]:
    """Per broker: what it assigns each of two heartbeating push consumers of billing/orders."""
    answers = []
    for pod in pods:
        endpoint = clientprotocol.endpoint(pod)
        for client_id in CONSUMERS:
            clientprotocol.heartbeat(endpoint, group="billing", client_id=client_id)
        answers.append(
            {
                client_id: clientprotocol.query_assignment(
                    endpoint, topic="orders", group="billing", client_id=client_id
                )
                for client_id in CONSUMERS
            }
        )
    return answers


def test_the_operator_runs_as_the_chart_pod_with_its_own_least_privilege_rbac(
    popfleet_release: cluster.Cluster,
) -> None:
    (pod,) = popfleet_release.pods("popfleet-system", "app.kubernetes.io/name=popfleet-operator")
    assert pod["spec"]["serviceAccountName"] == "popfleet"
    assert popfleet_release.is_ready(pod)
    who = "--as=system:serviceaccount:popfleet-system:popfleet"

    def can(verb: str, resource: str) -> bool:
        try:
            answer = popfleet_release.kubectl("auth", "can-i", verb, resource, "-A", who)
        except errors.TestbedError as exc:  # kubectl exits 1 for "no"
            if "have a resource type" in str(exc):  # a typo in the test is no answer
                raise
            answer = "no"
        return answer.strip().splitlines()[-1].strip() == "yes"

    for verb, resource in [
        ("patch", "topics.popfleet.io"),
        ("patch", "consumergroups.popfleet.io/status"),
        ("create", "statefulsets.apps"),
        ("list", "pods"),
        ("get", "secrets"),
    ]:
        assert can(verb, resource), f"the operator cannot {verb} {resource}"
    for verb, resource in [
        ("delete", "topics.popfleet.io"),
        ("delete", "statefulsets.apps"),
        ("list", "secrets"),
        ("create", "pods"),
        ("create", "clusterroles.rbac.authorization.k8s.io"),
    ]:
        assert not can(verb, resource), f"the operator may {verb} {resource}"


def test_cluster_becomes_ready_with_three_brokers(
    popfleet_release: cluster.Cluster, ns: str
) -> None:
    bc = story.wait_condition(popfleet_release, ns, "brokerclusters", CLUSTER, "Ready")
    status = bc["status"]
    assert status["readyBrokers"] == 3 and status["brokersReady"] == "3/3"
    assert [b["name"] for b in status["brokers"]] == ["demo-0", "demo-1", "demo-2"]
    for broker in status["brokers"]:
        assert broker["ready"] and broker["endpoint"].startswith("127.") and broker["configEpoch"]
    pods = story.broker_pods(popfleet_release, ns, CLUSTER)
    assert [c["name"] for c in pods[0]["spec"]["containers"]] == [
        "store",
        "popack",
        "revive",
        "front",
    ]
    members = story.on_broker(pods[0], lambda admin: admin.members())
    assert [(m.broker_name, m.endpoint) for m in members] == [
        (b["name"], b["endpoint"]) for b in status["brokers"]
    ]
    listing = popfleet_release.kubectl("get", "bc", "-n", ns)
    assert "True" in listing and "3/3" in listing


def test_topic_is_read_back_on_every_broker(popfleet_release: cluster.Cluster, ns: str) -> None:
    topic = story.wait_condition(popfleet_release, ns, "topics", "orders", "TopicSynced")
    assert topic["status"]["syncedBrokers"] == "3/3"
    assert story.condition(topic, "Ready")["status"] == "True"
    for pod in story.broker_pods(popfleet_release, ns, CLUSTER):
        topics = story.on_broker(pod, lambda admin: admin.topics())
        assert [(t.name, t.read_queue_nums, t.write_queue_nums) for t in topics] == [
            ("orders", 4, 4)
        ]


def test_group_switches_from_pull_to_pop_everywhere(
    popfleet_release: cluster.Cluster, ns: str
) -> None:
    story.wait_condition(popfleet_release, ns, "consumergroups", "billing", "ModeApplied")
    pods = story.broker_pods(popfleet_release, ns, CLUSTER)
    for pod in pods:
        assert modes(pod) == [("orders", "PULL", 0, True)]
    every_queue = sorted((f"demo-{b}", q) for b in range(3) for q in range(4))
    for answer in assignments(pods):  # PULL: each queue to exactly one of the two consumers
        first, second = answer[CONSUMERS[0]], answer[CONSUMERS[1]]
        assert len(first) == len(second) == 6 and not set(first) & set(second)
        assert sorted(first + second) == every_queue
    story.patch_spec(
        popfleet_release,
        ns,
        "consumergroups",
        "billing",
        {"consumeMode": "POP", "popShareQueueNum": 1},
    )
    group = story.wait_condition(popfleet_release, ns, "consumergroups", "billing", "ModeApplied")
    assert [
        (b["mode"], b["popShareQueueNum"], b["synced"]) for b in group["status"]["brokers"]
    ] == [("POP", 1, True)] * 3
    for pod in story.broker_pods(popfleet_release, ns, CLUSTER):
        assert modes(pod) == [("orders", "POP", 1, True)]
    listing = popfleet_release.kubectl("get", "cg", "-n", ns)
    assert "POP" in listing and "3/3" in listing
    # POP with popShareQueueNum 1 >= consumers - 1: both consumers pop every queue (-1) of
    # every broker, whichever broker they ask (a broker may answer from its config cache for
    # up to its TTL, so poll).
    every_broker = [(f"demo-{b}", -1) for b in range(3)]
    pop_answer = [{client_id: every_broker for client_id in CONSUMERS}] * 3
    waiting.until(
        lambda: assignments(pods) == pop_answer,
        timeout_s=30,
        what="every broker assigning every queue (-1) to both POP consumers",
    )


def test_broker_with_wiped_volume_gets_topics_groups_and_modes_back(
    popfleet_release: cluster.Cluster, ns: str
) -> None:
    before = story.get(popfleet_release, ns, "consumergroups", "billing")
    assert before is not None
    old_epoch = before["status"]["brokers"][1]["configEpoch"]
    popfleet_release.kubectl("delete", "pvc", "data-demo-1", "-n", ns, "--wait=false")
    popfleet_release.kubectl("delete", "pod", "demo-1", "-n", ns)

    def reapplied(obj: dict[str, Any]) -> bool:
        entry = obj["status"]["brokers"][1]
        return bool(
            entry["configEpoch"] != old_epoch and entry["synced"] and entry["mode"] == "POP"
        )

    story.wait_condition(
        popfleet_release, ns, "consumergroups", "billing", "ModeApplied", also=reapplied
    )
    pod = next(
        p
        for p in story.broker_pods(popfleet_release, ns, CLUSTER)
        if p["metadata"]["name"] == "demo-1"
    )
    assert modes(pod) == [("orders", "POP", 1, True)]

    story.wait_event(popfleet_release, ns, "Reapplied", "demo-1")


def test_scale_up_replays_every_topic_group_and_mode(
    popfleet_release: cluster.Cluster, ns: str
) -> None:
    story.patch_spec(popfleet_release, ns, "brokerclusters", CLUSTER, {"brokers": 4})
    story.wait_condition(
        popfleet_release,
        ns,
        "brokerclusters",
        CLUSTER,
        "Ready",
        also=lambda bc: bc["status"]["readyBrokers"] == 4,
    )
    story.wait_condition(
        popfleet_release,
        ns,
        "consumergroups",
        "billing",
        "ModeApplied",
        also=lambda cg: cg["status"]["syncedBrokers"] == "4/4",
    )
    newest = story.broker_pods(popfleet_release, ns, CLUSTER)[-1]
    assert newest["metadata"]["name"] == "demo-3"
    assert [t.name for t in story.on_broker(newest, lambda admin: admin.topics())] == ["orders"]
    assert modes(newest) == [("orders", "POP", 1, True)]

    def four_members() -> bool:
        pods = story.broker_pods(popfleet_release, ns, CLUSTER)
        lists = [story.on_broker(p, lambda admin: admin.members()) for p in pods]
        return all(len(members) == 4 for members in lists)

    waiting.until(four_members, timeout_s=30, what="4 members on every broker")


BACKLOG = 5


def test_scale_down_waits_while_the_leaving_broker_holds_messages(
    popfleet_release: cluster.Cluster, ns: str
) -> None:
    leaving = story.broker_pods(popfleet_release, ns, CLUSTER)[3]
    clientprotocol.send(clientprotocol.endpoint(leaving), topic="orders", count=BACKLOG)
    story.patch_spec(popfleet_release, ns, "brokerclusters", CLUSTER, {"brokers": 3})
    bc = story.wait_condition(
        popfleet_release, ns, "brokerclusters", CLUSTER, "Reconciling", reason="ScaleDownBlocked"
    )
    why = story.condition(bc, "Reconciling")["message"]
    assert f"broker 3: {BACKLOG} messages not yet consumed" in why
    assert story.condition(bc, "Degraded")["reason"] == "ScaleDownBlocked"
    assert story.condition(bc, "Ready")["status"] == "False"
    sts = popfleet_release.admin.get(f"/apis/apps/v1/namespaces/{ns}/statefulsets/{CLUSTER}")
    assert sts["spec"]["replicas"] == 4
    assert [p["metadata"]["name"] for p in story.broker_pods(popfleet_release, ns, CLUSTER)][
        -1
    ] == "demo-3"

    story.wait_event(popfleet_release, ns, "ScaleDownBlocked", "messages not yet consumed")


def test_scale_down_goes_ahead_once_the_messages_are_consumed(
    popfleet_release: cluster.Cluster, ns: str
) -> None:
    leaving = story.broker_pods(popfleet_release, ns, CLUSTER)[3]
    endpoint = clientprotocol.endpoint(leaving)
    acked = clientprotocol.consume(endpoint, group="billing", topic="orders", count=BACKLOG)
    assert acked == BACKLOG
    three = ["demo-0", "demo-1", "demo-2"]
    bc = story.wait_condition(
        popfleet_release, ns, "brokerclusters", CLUSTER, "Ready",
        also=lambda bc: [b["name"] for b in bc["status"]["brokers"]] == three,
    )  # fmt: skip
    assert story.condition(bc, "Reconciling")["reason"] == "Reconciled"

    def three_members_everywhere() -> bool:
        pods = story.broker_pods(popfleet_release, ns, CLUSTER)
        if len(pods) != 3:
            return False
        lists = [story.on_broker(p, lambda admin: admin.members()) for p in pods]
        return all(len(members) == 3 for members in lists)

    waiting.until(three_members_everywhere, timeout_s=60, what="3 members on the 3 brokers left")
    story.wait_condition(
        popfleet_release, ns, "consumergroups", "billing", "ModeApplied",
        also=lambda cg: cg["status"]["syncedBrokers"] == "3/3",
    )  # fmt: skip


def test_unreachable_broker_degrades_then_recovers(
    popfleet_release: cluster.Cluster, ns: str
) -> None:
    pod = story.broker_pods(popfleet_release, ns, CLUSTER)[0]
    store = story.container_process(popfleet_release, pod, "store")
    story.freeze(store, frozen=True)
    try:
        topic = story.wait_condition(
            popfleet_release, ns, "topics", "orders", "Degraded", reason="BrokerUnreachable"
        )
        assert "demo-0" in story.condition(topic, "Degraded")["message"]
        assert story.condition(topic, "TopicSynced")["status"] == "False"
        group = story.wait_condition(
            popfleet_release, ns, "consumergroups", "billing", "Degraded",
            reason="BrokerUnreachable",
        )  # fmt: skip
        assert "demo-0" in story.condition(group, "Degraded")["message"]
        assert story.condition(group, "ModeApplied")["status"] == "False"
    finally:
        story.freeze(store, frozen=False)
    for plural, name, domain in (
        ("topics", "orders", "TopicSynced"),
        ("consumergroups", "billing", "ModeApplied"),
    ):
        story.wait_condition(popfleet_release, ns, plural, name, "Degraded", status="False")
        story.wait_condition(popfleet_release, ns, plural, name, domain)


def test_second_claim_on_a_topic_conflicts_and_touches_nothing(
    popfleet_release: cluster.Cluster, ns: str
) -> None:
    duplicate = topic_cr("orders-again")
    duplicate["spec"].update(topicName="orders", queues=16)
    popfleet_release.apply(ns, duplicate)
    loser = story.wait_condition(
        popfleet_release, ns, "topics", "orders-again", "Ready", status="False",
        reason="ResourceConflict",
    )  # fmt: skip
    assert "'orders'" in story.condition(loser, "Ready")["message"]
    pod = story.broker_pods(popfleet_release, ns, CLUSTER)[0]
    topics = story.on_broker(pod, lambda admin: admin.topics())
    assert [(t.name, t.write_queue_nums) for t in topics] == [("orders", 4)]
    popfleet_release.kubectl("delete", "topic", "orders-again", "-n", ns, "--timeout=60s")
    assert (
        story.condition(story.get(popfleet_release, ns, "topics", "orders"), "Ready")["status"]
        == "True"
    )


def test_paused_topic_waits_and_resumes(popfleet_release: cluster.Cluster, ns: str) -> None:
    popfleet_release.kubectl("annotate", "topic", "orders", "-n", ns, "popfleet.io/paused=true")
    story.patch_spec(popfleet_release, ns, "topics", "orders", {"queues": 6})
    story.wait_condition(
        popfleet_release, ns, "topics", "orders", "Reconciling", status="False",
        reason="ReconciliationPaused",
    )  # fmt: skip
    pod = story.broker_pods(popfleet_release, ns, CLUSTER)[0]
    assert story.on_broker(pod, lambda admin: admin.topics())[0].write_queue_nums == 4
    popfleet_release.kubectl("annotate", "topic", "orders", "-n", ns, "popfleet.io/paused-")
    story.wait_condition(popfleet_release, ns, "topics", "orders", "TopicSynced")
    for pod in story.broker_pods(popfleet_release, ns, CLUSTER):
        assert story.on_broker(pod, lambda admin: admin.topics())[0].write_queue_nums == 6


def test_invalid_spec_is_a_permanent_condition(popfleet_release: cluster.Cluster, ns: str) -> None:
    broken = brokers_cr(1)
    broken["metadata"]["name"] = "broken"
    broken["spec"]["resources"] = {"store": {"requests": {"cpu": "lots"}}}
    popfleet_release.apply(ns, broken)
    bc = story.wait_condition(
        popfleet_release, ns, "brokerclusters", "broken", "Ready", status="False",
        reason="InvalidSpec",
    )  # fmt: skip
    assert "spec.resources.store.requests.cpu" in story.condition(bc, "Ready")["message"]
    assert not story.broker_pods(popfleet_release, ns, "broken")
    popfleet_release.kubectl("delete", "bc", "broken", "-n", ns, "--timeout=60s")


def test_deletion_retain_keeps_and_delete_removes(
    popfleet_release: cluster.Cluster, ns: str
) -> None:
    popfleet_release.apply(
        ns,
        topic_cr("audit-log", policy="Delete"),
        group_cr("auditors", "audit-log", policy="Delete"),
    )
    story.wait_condition(
        popfleet_release, ns, "consumergroups", "auditors", "ModeApplied", timeout_s=60
    )
    pod = story.broker_pods(popfleet_release, ns, CLUSTER)[0]

    # Delete waits while the group has messages to consume, and says where.
    clientprotocol.send(clientprotocol.endpoint(pod), topic="audit-log", count=3)
    popfleet_release.kubectl("delete", "consumergroup", "auditors", "-n", ns, "--wait=false")
    blocked = story.wait_condition(
        popfleet_release, ns, "consumergroups", "auditors", "Ready", status="False",
        reason="DeletionBlocked",
    )  # fmt: skip
    assert "demo-0: 3 messages" in story.condition(blocked, "Ready")["message"]
    assert "auditors" in [g.name for g in story.on_broker(pod, lambda admin: admin.groups())]
    endpoint = clientprotocol.endpoint(pod)
    clientprotocol.consume(endpoint, group="auditors", topic="audit-log", count=3)
    waiting.until(
        lambda: story.get(popfleet_release, ns, "consumergroups", "auditors") is None,
        timeout_s=60,
        what="auditors finalized once drained",
    )
    popfleet_release.kubectl("delete", "topic", "audit-log", "-n", ns, "--timeout=60s")
    groups = story.on_broker(pod, lambda admin: admin.groups())
    topics = story.on_broker(pod, lambda admin: admin.topics())
    assert "auditors" not in [g.name for g in groups]
    assert "audit-log" not in [t.name for t in topics]

    popfleet_release.kubectl("delete", "consumergroup", "billing", "-n", ns, "--timeout=60s")
    popfleet_release.kubectl("delete", "topic", "orders", "-n", ns, "--timeout=60s")
    assert "billing" in [g.name for g in story.on_broker(pod, lambda admin: admin.groups())]
    setting = story.on_broker(pod, lambda admin: admin.consume_mode("billing", "orders"))
    assert setting.mode is models.ConsumeMode.POP
