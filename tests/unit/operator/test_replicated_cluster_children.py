"""Builders and pod views for ``spec.replication`` (issue 18): one StatefulSet per replica
index, per-pod arguments from the pod-index label that the broker's own CLI accepts, a
Service per set that follows the leader label, and admin calls routed to each set's leader."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from popbroker.replicator.replication_role import ReplicationOptions
from popbroker.roles import store
from popfleet_operator import builders
from popfleet_operator.model import names, observations, specs

REPLICATED = {"brokers": 2, "replication": {"replicas": 3, "mode": "ASYNC", "minInSyncReplicas": 2}}


def children(owner: specs.ObjectRef, raw: dict[str, Any]) -> list[dict[str, Any]]:
    spec = specs.parse_cluster(raw)
    return builders.children(
        owner, spec, replicas=spec.brokers, partition=0, replica_cluster_role="rel-replica"
    )


def of_kind(objs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


def expand(text: str, env: dict[str, str]) -> str:
    """``$(VAR)`` the way the kubelet expands container args."""
    return re.sub(r"\$\(([A-Z_]+)\)", lambda m: env[m.group(1)], text)


def test_one_statefulset_per_replica_index_and_name_keeps_its_selector(
    owner: specs.ObjectRef,
) -> None:
    plain = of_kind(children(owner, {"brokers": 2}), "StatefulSet")
    sets = of_kind(children(owner, REPLICATED), "StatefulSet")
    name = owner.name
    assert list(plain) == [name]
    assert list(sets) == [name, f"{name}-r1", f"{name}-r2"]
    # StatefulSet NAME's selector is immutable: replication must not touch it.
    assert sets[name]["spec"]["selector"] == plain[name]["spec"]["selector"]
    for replica, sts in enumerate(sets.values()):
        selector = sts["spec"]["selector"]["matchLabels"]
        labels = sts["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items()
        assert labels.get(names.LABEL_REPLICA_INDEX) == (str(replica) if replica else None)
        assert sts["spec"]["replicas"] == 2
        assert sts["spec"]["serviceName"] == names.headless_service(name)  # one DNS domain
        pod = sts["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is True
        term = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        assert term[0]["podAffinityTerm"]["matchLabelKeys"] == [names.LABEL_POD_INDEX]
    assert plain[name]["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    assert "affinity" not in plain[name]["spec"]["template"]["spec"]


def test_the_store_args_of_any_pod_expand_to_its_set_and_parse_as_the_broker_cli(
    owner: specs.ObjectRef, tmp_path: Path
) -> None:
    sts = of_kind(children(owner, REPLICATED), "StatefulSet")[f"{owner.name}-r2"]
    (container,) = [
        c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == "store"
    ]
    env_names = [e["name"] for e in container["env"]]
    assert "POD_INDEX" in env_names
    pod_index = next(e for e in container["env"] if e["name"] == "POD_INDEX")
    assert pod_index["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.labels['apps.kubernetes.io/pod-index']"
    )
    env = {"POD_NAME": f"{owner.name}-r2-1", "POD_INDEX": "1", "POD_IP": "10.1.2.3"}
    env["POD_NAMESPACE"] = "apps"
    token = tmp_path / "token"
    token.write_text("t0k3n\n")
    args = [expand(a, env) for a in container["args"][1:]]
    args = [
        f"--replication-token-file={token}" if a.startswith("--replication-token-file=") else a
        for a in args
    ]
    parsed = store.parse_args(args)
    options = ReplicationOptions.from_args(parsed)
    assert options is not None
    assert parsed.broker_name == f"{owner.name}-1"  # every replica of set 1 stores broker NAME-1
    assert options.name == f"{owner.name}-r2-1"
    domain = f"{names.headless_service(owner.name)}.apps.svc"
    assert options.peers == {
        f"{owner.name}-1": (f"{owner.name}-1.{domain}", 9878),
        f"{owner.name}-r1-1": (f"{owner.name}-r1-1.{domain}", 9878),
        f"{owner.name}-r2-1": (f"{owner.name}-r2-1.{domain}", 9878),
    }
    assert options.listen == ("10.1.2.3", 9878)
    assert (options.lease_namespace, options.lease_name) == ("apps", f"{owner.name}-1")
    assert options.client_endpoint == f"{owner.name}-1.apps.svc:8081"
    assert options.synchronous is False and options.min_in_sync == 2
    assert options.leader_label_selector and options.leader_file == Path(names.LEADER_FILE)
    assert options.token == b"t0k3n"
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    assert volumes["replication"]["secret"]["secretName"] == f"{owner.name}-replication"


def matches(selector: str, labels: dict[str, str]) -> bool:
    """An equality-based label selector (``k=v,...``) against a pod's labels."""
    wanted = dict(term.split("=", 1) for term in selector.split(","))
    return wanted.items() <= labels.items()


def test_the_leader_label_selector_of_every_pod_matches_exactly_the_pods_of_its_set(
    owner: specs.ObjectRef,
) -> None:
    """A set's leader takes the leader label off the other pods its selector matches: a
    selector naming a label the pods lack would leave a cut-off leader labelled (and the
    Service reaching it) for good; one matching other sets would steal their labels."""
    sets = of_kind(children(owner, REPLICATED), "StatefulSet")
    pods: dict[str, tuple[int, dict[str, str]]] = {}
    selectors: dict[str, str] = {}
    for sts_name, sts in sets.items():
        template = sts["spec"]["template"]
        (container,) = [c for c in template["spec"]["containers"] if c["name"] == "store"]
        for ordinal in range(sts["spec"]["replicas"]):
            pod = f"{sts_name}-{ordinal}"
            # what the StatefulSet controller puts on the pod besides the template's labels
            labels = {**template["metadata"]["labels"], names.LABEL_POD_INDEX: str(ordinal)}
            pods[pod] = (ordinal, labels)
            env = {"POD_NAME": pod, "POD_INDEX": str(ordinal), "POD_IP": "10.1.2.3"}
            (flag,) = [a for a in container["args"] if a.startswith("--leader-label-selector=")]
            selectors[pod] = expand(flag.partition("=")[2], env)
    assert len(pods) == 6
    for pod, (ordinal, _) in pods.items():
        matched = {other for other, (_, labels) in pods.items() if matches(selectors[pod], labels)}
        assert matched == {other for other, (o, _) in pods.items() if o == ordinal}, pod
    services = of_kind(children(owner, REPLICATED), "Service")
    for pod, (ordinal, labels) in pods.items():
        service = services[f"{owner.name}-{ordinal}"]["spec"]["selector"]
        leader_selector = ",".join(f"{k}={v}" for k, v in service.items())
        labelled = {**labels, names.LABEL_LEADER: "true"}
        assert matches(leader_selector, labelled) and matches(selectors[pod], labelled)


def test_popfront_serves_the_leader_port_by_the_store_roles_leader_file(
    owner: specs.ObjectRef,
) -> None:
    sts = of_kind(children(owner, REPLICATED), "StatefulSet")[owner.name]
    front = next(c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == "front")
    assert "-leader-listen=$(POD_IP):8082" in front["args"]
    assert f"-leader-file={names.LEADER_FILE}" in front["args"]
    assert {"name": "leader", "containerPort": 8082, "protocol": "TCP"} in front["ports"]


def test_a_service_per_set_selects_its_leader_and_the_brokers_get_the_replica_role(
    owner: specs.ObjectRef,
) -> None:
    objs = children(owner, REPLICATED)
    services = of_kind(objs, "Service")
    for i in (0, 1):
        service = services[f"{owner.name}-{i}"]
        assert service["spec"]["selector"] == {
            **names.selector_labels(owner.name),
            "apps.kubernetes.io/pod-index": str(i),
            "popfleet.io/leader": "true",
        }
        assert service["spec"]["ports"] == [
            {"name": "client", "port": 8081, "targetPort": "leader", "protocol": "TCP"}
        ]
    assert f"{owner.name}-2" not in services
    leases = of_kind(objs, "Lease")
    assert set(leases) == {f"{owner.name}-0", f"{owner.name}-1"}
    for skeleton in leases.values():  # ownership only: the stores write the spec
        assert set(skeleton) == {"apiVersion", "kind", "metadata"}
        assert skeleton["metadata"]["ownerReferences"][0]["uid"] == owner.uid
    (binding,) = of_kind(objs, "RoleBinding").values()
    assert binding["roleRef"]["name"] == "rel-replica"
    assert binding["subjects"][0]["name"] == names.service_account(owner.name)
    (policy,) = of_kind(objs, "NetworkPolicy").values()
    replication_rule = next(
        r for r in policy["spec"]["ingress"] if {"port": 9878, "protocol": "TCP"} in r["ports"]
    )
    assert replication_rule["from"] == [
        {"podSelector": {"matchLabels": names.selector_labels(owner.name)}}
    ]
    plain = children(owner, {"brokers": 2})
    assert not of_kind(plain, "RoleBinding")
    assert set(of_kind(plain, "Service")) == {owner.name, names.headless_service(owner.name)}


def raw_pod(name: str, *, ip: str, leader: bool = False, terminating: bool = False) -> Any:
    meta: dict[str, Any] = {"name": name, "labels": {}}
    if leader:
        meta["labels"][names.LABEL_LEADER] = "true"
    if terminating:
        meta["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    return {"metadata": meta, "status": {"podIP": ip}}


def test_admin_calls_go_to_each_sets_leader_else_replica_zero() -> None:
    raw = [
        raw_pod("demo-0", ip="10.0.0.1"),
        raw_pod("demo-r1-0", ip="10.0.0.2", leader=True),
        raw_pod("demo-r2-0", ip="10.0.0.3"),
        raw_pod("demo-1", ip="10.0.1.1"),  # set 1: no leader labelled yet
        raw_pod("demo-r1-1", ip="10.0.1.2"),
        raw_pod("demo-2", ip="10.0.2.1", leader=True, terminating=True),  # going: not it
        raw_pod("demo-r2-2", ip="10.0.2.3", leader=True),
        raw_pod("demo-extra-0", ip="10.9.9.9", leader=True),  # foreign name
    ]
    serving = observations.serving_pods("demo", raw)
    assert [(p.name, p.ordinal, p.pod_ip) for p in serving] == [
        ("demo-0", 0, "10.0.0.2"),
        ("demo-1", 1, "10.0.1.1"),
        ("demo-2", 2, "10.0.2.3"),
    ]


@pytest.mark.parametrize(
    ("pod", "where"),
    [
        ("demo-3", (0, 3)),
        ("demo-r1-3", (1, 3)),
        ("demo-r2-0", (2, 0)),
        ("demo-r0-1", None),
        ("demo-rx-1", None),
        ("demo-r1-", None),
        ("other-1", None),
    ],
)
def test_replica_and_ordinal_from_a_pod_name(pod: str, where: tuple[int, int] | None) -> None:
    assert names.replica_of("demo", pod) == where


def test_each_replica_statefulset_gets_its_own_partition(owner: specs.ObjectRef) -> None:
    spec = specs.parse_cluster(REPLICATED)
    objs = builders.children(
        owner, spec, replicas=2, partition=1, replica_cluster_role="r", replica_partitions=[2, 0]
    )
    sets = of_kind(objs, "StatefulSet")
    got = {n: s["spec"]["updateStrategy"]["rollingUpdate"]["partition"] for n, s in sets.items()}
    assert got == {owner.name: 1, f"{owner.name}-r1": 2, f"{owner.name}-r2": 0}
    for replica, sts in enumerate(sets.values()):  # the hash the rollout gate compares
        annotation = sts["metadata"]["annotations"][names.TEMPLATE_HASH]
        assert annotation == builders.pod_template_hash(owner, spec, replica)
