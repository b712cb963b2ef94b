"""``helm uninstall`` on the testbed: the pre-delete hook lets the operator finalize every CR.

Steps: install the chart (hook timeout 20 s) -> a 1-broker cluster, a Retain and a Delete
Topic, a Delete ConsumerGroup with 2 messages still to consume -> the first uninstall fails:
the hook names the group and its backlog, the operator keeps running, the cluster is
untouched -> the messages are consumed (the operator has logged no unexpected error and has
not restarted) -> the second uninstall succeeds and leaves no custom resource, no stuck
finalizer, no child object, no hook object; only the brokers' PVC stays (StatefulSet
retention policy) and the CRDs (``crds.keep``).
"""

from __future__ import annotations

from typing import Any

import pytest

from popfleet_testbed import cluster, errors, kube, waiting
from tests.integration.operator import clientprotocol, story

RELEASE = "leaving"
RELEASE_NS = "popfleet-leaving"
HOOK = f"{RELEASE}-popfleet-cleanup"
CLUSTER = "demo"
GROUP_API = "popfleet.io/v1alpha1"
CHILDREN = (  # (API group/version, plural) of what the operator creates for a BrokerCluster
    ("apps/v1", "statefulsets"),
    ("", "services"),
    ("", "configmaps"),
    ("", "serviceaccounts"),
    ("policy/v1", "poddisruptionbudgets"),
    ("networking.k8s.io/v1", "networkpolicies"),
    ("", "pods"),
)


def manifests() -> list[dict[str, Any]]:
    return [
        story.brokers_cr(CLUSTER, 1),
        story.topic_cr("kept", CLUSTER, queues=2),
        story.topic_cr("dropped", CLUSTER, queues=2, policy="Delete"),
        story.group_cr("auditors", CLUSTER, "dropped", policy="Delete"),
    ]


def children(tb: cluster.Cluster, namespace: str) -> dict[str, list[str]]:
    found = {}
    for group, plural in CHILDREN:
        objs = tb.admin.items(
            kube.ns_path(namespace, plural, group=group),
            {"labelSelector": f"popfleet.io/cluster={CLUSTER}"},
        )
        found[plural] = sorted(o["metadata"]["name"] for o in objs)
    return found


def custom_resources(tb: cluster.Cluster) -> list[str]:
    return [
        f"{plural}/{o['metadata']['namespace']}/{o['metadata']['name']}"
        for plural in ("brokerclusters", "topics", "consumergroups")
        for o in tb.admin.items(f"/apis/{GROUP_API}/{plural}")
    ]


def uninstall(tb: cluster.Cluster) -> str:
    return tb.helm(
        "uninstall", RELEASE, "-n", RELEASE_NS, "--wait", "--timeout", "180s", timeout_s=210
    )


def broker_endpoint(tb: cluster.Cluster, namespace: str) -> str:
    (pod,) = story.broker_pods(tb, namespace, CLUSTER)
    return clientprotocol.endpoint(pod)


@pytest.mark.timeout(600)
def test_uninstall_waits_for_a_backlog_then_leaves_nothing_behind(
    testbed: cluster.Cluster, testbed_namespace: str
) -> None:
    tb, ns = testbed, testbed_namespace
    story.install_chart(
        tb, release=RELEASE, namespace=RELEASE_NS, values=("cleanup.timeoutSeconds=20",)
    )
    try:
        tb.apply(ns, *manifests())
        story.wait_condition(tb, ns, "brokerclusters", CLUSTER, "Ready", timeout_s=120)
        story.wait_condition(tb, ns, "topics", "kept", "TopicSynced")
        story.wait_condition(tb, ns, "consumergroups", "auditors", "ModeApplied")
        made = children(tb, ns)
        assert all(made.values()), made
        clientprotocol.send(broker_endpoint(tb, ns), topic="dropped", count=2)

        # 1. The group cannot go while it has messages to consume: the uninstall fails.
        with pytest.raises(errors.TestbedError) as refused:
            uninstall(tb)
        assert f"job {HOOK} failed" in str(refused.value)
        (hook_pod,) = tb.pods(RELEASE_NS, "app.kubernetes.io/name=popfleet-cleanup")
        said = tb.log(hook_pod)
        assert f"ConsumerGroup {ns}/auditors" in said and "DeletionBlocked" in said, said
        assert "demo-0: 2 messages" in said, said
        tb.wait_ready(RELEASE_NS, "app.kubernetes.io/name=popfleet-operator", 1)
        assert story.get(tb, ns, "topics", "kept") is None  # Retain: finalized at once
        assert (
            story.condition(story.get(tb, ns, "brokerclusters", CLUSTER), "Ready")["status"]
            == "True"
        )

        # 2. Consumed: the operator (still running) finalizes the group, then the topic.
        clientprotocol.consume(broker_endpoint(tb, ns), group="auditors", topic="dropped", count=2)
        operator = story.operator_pod(tb, RELEASE_NS)
        assert story.restarts(operator) == 0
        assert story.unexpected_errors(tb.log(operator)) == []
        uninstall(tb)
    except BaseException:
        tb.helm("uninstall", RELEASE, "-n", RELEASE_NS, "--no-hooks", timeout_s=120)
        raise

    assert custom_resources(tb) == []
    assert children(tb, ns) == {plural: [] for _, plural in CHILDREN}
    claims = tb.admin.items(kube.ns_path(ns, "persistentvolumeclaims"))
    assert [c["metadata"]["name"] for c in claims] == ["data-demo-0"]  # retained on purpose
    deleted = story.events(tb, ns, "Deleted")
    assert "dropped" in deleted and "auditors" in deleted
    assert "kept" in story.events(tb, ns, "Retained")
    waiting.until(  # the operator's and the hook's pods: garbage-collected after their owners
        lambda: tb.admin.items(kube.ns_path(RELEASE_NS, "pods")) == [],
        timeout_s=60,
        what=f"no pod left in {RELEASE_NS}",
    )
    assert tb.admin.items(kube.ns_path(RELEASE_NS, "jobs", group="batch/v1")) == []
    for leftover in (
        kube.ns_path(RELEASE_NS, "serviceaccounts", HOOK),
        f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{HOOK}",
        f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{HOOK}",
    ):
        assert tb.admin.get_or_none(leftover) is None, leftover
    assert tb.admin.get_or_none(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/topics.popfleet.io"
    )
