"""Builders: a BrokerCluster spec becomes the StatefulSet and its companions (pure)."""

from __future__ import annotations

from typing import Any

from popfleet_operator import builders
from popfleet_operator.builders import configmaps, statefulsets
from popfleet_operator.model import names, specs


def sts(owner: specs.ObjectRef, spec: specs.ClusterSpec, replicas: int = 3) -> dict[str, Any]:
    return statefulsets.build(owner, spec, replicas=replicas, config_hash="h", partition=0)


def test_three_roles_and_the_front_share_the_volume_and_sockets(owner: specs.ObjectRef) -> None:
    spec = specs.parse_cluster({"brokers": 3, "image": "ghcr.io/popfleet/broker:0.1.0"})
    pod = sts(owner, spec)["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    assert list(containers) == ["store", "popack", "revive", "front"]
    for container in containers.values():
        assert container["image"] == "ghcr.io/popfleet/broker:0.1.0"
        assert {"name": "data", "mountPath": "/data"} in container["volumeMounts"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["runAsNonRoot"] is True
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    for role in ("store", "popack", "revive"):
        assert containers[role]["args"][0] == role
        assert "command" not in containers[role]  # the image's entry point, popbroker
    assert "--socket=/data/store.sock" in containers["store"]["args"]
    assert "--store-socket=/data/store.sock" in containers["popack"]["args"]
    assert "--data-dir=/data/store" in containers["popack"]["args"]  # direct reads
    assert "--data-dir=/data/store" in containers["store"]["args"]
    assert "--data-dir=/data/store" in containers["revive"]["args"]
    assert "--store-socket=/data/store.sock" in containers["revive"]["args"]
    assert "--admin-listen=$(POD_IP):9877" in containers["store"]["args"]
    # popack serves the front on a socket and advertises the front's client port
    assert "--listen=unix:/data/popack.sock" in containers["popack"]["args"]
    assert "--advertise=$(POD_IP):8081" in containers["popack"]["args"]
    front = containers["front"]
    assert front["command"] == ["popfront"]
    assert front["args"] == [
        "-listen=$(POD_IP):8081",
        "-upstream=unix:///data/popack.sock",
        "-metrics-listen=$(POD_IP):9103",
    ]
    assert {"name": "client", "containerPort": 8081, "protocol": "TCP"} in front["ports"]
    assert all(p["name"] != "client" for p in containers["popack"]["ports"])
    assert pod["securityContext"]["runAsNonRoot"] is True


def test_popfront_flags_parse_as_its_flag_set() -> None:
    """The front's args use Go's -flag=value form, one word each (no spaces to split)."""
    pod = statefulsets.front_container(specs.parse_cluster({"tls": {"secretName": "t"}}))
    assert all(a.startswith("-") and "=" in a and " " not in a for a in pod["args"])


def test_probes_ask_the_store_health_and_popack_through_the_front(
    owner: specs.ObjectRef,
) -> None:
    pod = sts(owner, specs.parse_cluster({}))["spec"]["template"]["spec"]
    store, popack, _, front = pod["containers"]
    assert store["readinessProbe"]["grpc"] == {"port": names.ADMIN_PORT}
    assert store["livenessProbe"]["grpc"] == {"port": names.ADMIN_PORT}
    # kubelet's gRPC probe reaches popack's grpc.health.v1 through popfront
    assert front["readinessProbe"]["grpc"] == {"port": names.CLIENT_PORT}
    assert front["livenessProbe"]["grpc"] == {"port": names.CLIENT_PORT}
    assert popack["livenessProbe"]["httpGet"] == {
        "path": "/metrics",
        "port": names.METRICS_PORTS["popack"],
    }
    assert "readinessProbe" not in popack
    for container in (store, popack, front):  # the defaults, as before spec.livenessProbe
        timings = {
            k: v for k, v in container["livenessProbe"].items() if k not in ("grpc", "httpGet")
        }
        assert timings == {"periodSeconds": 10, "failureThreshold": 6} | (
            {} if container is store else {"initialDelaySeconds": 10}
        )


def test_liveness_timings_reach_every_probed_container(owner: specs.ObjectRef) -> None:
    spec = specs.parse_cluster(
        {"livenessProbe": {"periodSeconds": 3, "failureThreshold": 4, "timeoutSeconds": 2}}
    )
    store, popack, revive, front = sts(owner, spec)["spec"]["template"]["spec"]["containers"]
    for container in (store, popack, front):
        probe = container["livenessProbe"]
        assert (probe["periodSeconds"], probe["failureThreshold"], probe["timeoutSeconds"]) == (
            3, 4, 2,
        )  # fmt: skip
    assert "livenessProbe" not in revive  # it serves nothing to probe
    assert store["startupProbe"]["failureThreshold"] == 300  # start-up keeps its own budget


def test_spec_settings_reach_flags_resources_and_claims(owner: specs.ObjectRef) -> None:
    spec = specs.parse_cluster(
        {
            "flushMode": "SYNC",
            "reviveQueueNum": 4,
            "storage": {"size": "5Gi", "storageClassName": "fast"},
            "resources": {
                "store": {"requests": {"cpu": "500m"}, "limits": {"memory": "1Gi"}},
                "front": {"requests": {"cpu": "200m"}, "limits": {"memory": "256Mi"}},
            },
            "auth": {"adminTokenSecret": {"name": "tok", "key": "t"}},
        }
    )
    manifest = sts(owner, spec, replicas=4)
    pod = manifest["spec"]["template"]["spec"]
    store = pod["containers"][0]
    assert manifest["spec"]["replicas"] == 4
    assert "--flush-mode=sync" in store["args"]
    assert '--settings-json={"revive_queue_num": 4}' in store["args"]
    assert "--admin-token-file=/etc/popfleet-admin/token" in store["args"]
    assert store["resources"] == {"requests": {"cpu": "500m"}, "limits": {"memory": "1Gi"}}
    assert "resources" not in pod["containers"][1]
    front = next(c for c in pod["containers"] if c["name"] == "front")
    assert front["resources"] == {"requests": {"cpu": "200m"}, "limits": {"memory": "256Mi"}}
    claim = manifest["spec"]["volumeClaimTemplates"][0]["spec"]
    assert claim["resources"]["requests"]["storage"] == "5Gi"
    assert claim["storageClassName"] == "fast"
    secret = next(v for v in pod["volumes"] if v["name"] == "admin-token")["secret"]
    assert secret == {"secretName": "tok", "items": [{"key": "t", "path": "token"}]}


def test_selector_is_stable_and_labels_are_standard(owner: specs.ObjectRef) -> None:
    manifest = sts(owner, specs.parse_cluster({"image": "x:1"}))
    selector = manifest["spec"]["selector"]["matchLabels"]
    assert selector == names.selector_labels("demo")
    assert not any("version" in key or ":" in value for key, value in selector.items())
    labels = manifest["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "popfleet-operator"
    assert labels.items() >= selector.items()


def test_every_child_is_owned_by_the_cluster(owner: specs.ObjectRef) -> None:
    children = builders.children(owner, specs.parse_cluster({}), replicas=3, partition=0)
    kinds = [c["kind"] for c in children]
    assert kinds == [
        "ServiceAccount",
        "ConfigMap",
        "Service",
        "Service",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "StatefulSet",
    ]
    for child in children:
        (ref,) = child["metadata"]["ownerReferences"]
        assert ref == {
            "apiVersion": "popfleet.io/v1alpha1",
            "kind": "BrokerCluster",
            "name": "demo",
            "uid": "uid-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
        assert child["metadata"]["namespace"] == "ns"


def test_headless_service_publishes_not_ready_brokers(owner: specs.ObjectRef) -> None:
    headless, client = builders.children(owner, specs.parse_cluster({}), replicas=1, partition=0)[
        2:4
    ]
    assert headless["metadata"]["name"] == "demo-brokers"
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    assert [p["port"] for p in client["spec"]["ports"]] == [names.CLIENT_PORT]


def test_network_policy_opens_admin_port_to_operator_only(owner: specs.ObjectRef) -> None:
    policy = builders.children(owner, specs.parse_cluster({}), replicas=1, partition=0)[5]
    client_rule, admin_rule, metrics_rule = policy["spec"]["ingress"]
    assert "from" not in client_rule
    assert "from" not in metrics_rule  # Prometheus may scrape from any namespace
    assert admin_rule["ports"] == [{"port": names.ADMIN_PORT, "protocol": "TCP"}]
    apps = [f.get("podSelector", {}).get("matchLabels") for f in admin_rule["from"]]
    assert {names.LABEL_NAME: names.OPERATOR_APP} in apps


def test_config_change_changes_the_pod_template_hash(owner: specs.ObjectRef) -> None:
    one = configmaps.content_hash(configmaps.build(owner, specs.parse_cluster({})))
    two = configmaps.content_hash(
        configmaps.build(owner, specs.parse_cluster({"pop": {"ckMaxBufferSize": 5}}))
    )
    assert one != two
    children = builders.children(owner, specs.parse_cluster({}), replicas=1, partition=0)
    template = children[-1]["spec"]["template"]["metadata"]["annotations"]
    assert template[names.CONFIG_HASH] == one
