"""e2e/kind's pure parts: the pod-network resolver, values as --set pairs, the pinned node.

Nothing here dials anything: the resolver is only asked what it would allow.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.integration.kind_static.conftest import KIND, load

kind_access = load("kind_access")
TUNNEL = "http://127.0.0.1:40123"  # what proxy_tunnel exports once the port-forward is up
TUNNELLED = {"grpc_proxy": TUNNEL, "no_grpc_proxy": ""}


def test_node_image_and_kind_version_are_pinned() -> None:
    config = yaml.safe_load((KIND / "kind-config.yaml").read_text())
    (node,) = config["nodes"]
    assert re.fullmatch(r"kindest/node:v1\.\d+\.\d+@sha256:[0-9a-f]{64}", node["image"])
    mk = (KIND.parents[1] / "mk" / "kind.mk").read_text()
    assert re.search(r"^KIND_VERSION := v\d+\.\d+\.\d+$", mk, re.MULTILINE)
    assert "go install sigs.k8s.io/kind@$(KIND_VERSION)" in mk


def test_resolver_passes_pod_addresses_and_refuses_the_rest() -> None:
    resolve = kind_access.pod_network_resolver(
        kind_access.pod_subnet(), proxy=TUNNEL, environ=TUNNELLED
    )
    assert resolve("10.244.0.7:8081") == "10.244.0.7:8081"
    for bad in ("10.96.0.10:8081", "127.0.0.1:9877", "broker-0.svc:8081", "10.244.0.7"):
        with pytest.raises(kind_access.KindAccessError):
            resolve(bad)


def test_values_become_helm_set_pairs() -> None:
    sets = kind_access.helm_sets(KIND / "values" / "auth-tls.yaml")
    assert "image.pullPolicy=Never" in sets
    assert "operator.watchNamespaces={popfleet-secure}" in sets
    assert "replicaCount=2" in sets


def test_values_that_cannot_be_set_are_refused(tmp_path: Path) -> None:
    bad = yaml.safe_load((KIND / "values" / "kind.yaml").read_text())
    bad["podAnnotations"] = {"a": "x,y"}
    target = tmp_path / "bad-values.yaml"
    target.write_text(yaml.safe_dump(bad))
    with pytest.raises(kind_access.KindAccessError, match="cannot be passed as --set"):
        kind_access.helm_sets(target)


def test_kind_run_uses_the_shared_scenario_as_e2e_local_does() -> None:
    """The kind wiring and the scenario package agree (a renamed field would break e2e-kind
    only on a Docker machine; here it fails now)."""
    import dataclasses  # noqa: PLC0415

    from popfleet_e2e import lifecycle, scenario  # noqa: PLC0415
    from popfleet_e2e.access import ClusterAccess  # noqa: PLC0415

    fields = {f.name for f in dataclasses.fields(ClusterAccess)}
    assert {"kubeconfig", "namespace", "resolve", "bin_dir", "helm_values", "grpc_proxy"} <= fields
    assert callable(scenario.run) and callable(lifecycle.clean_up)
    source = (KIND / "kind_access.py").read_text()
    assert "scenario.run(access" in source and "lifecycle.clean_up(access)" in source
    access = ClusterAccess(
        kubeconfig=Path("/nonexistent/kubeconfig"),
        namespace="popfleet-e2e",
        resolve=kind_access.pod_network_resolver(
            kind_access.pod_subnet(), proxy=TUNNEL, environ=TUNNELLED
        ),
        bin_dir=Path("/nonexistent"),
        helm_values=kind_access.helm_sets(KIND / "values" / "kind.yaml"),
    )
    assert access.resolve("10.244.1.2:9877") == "10.244.1.2:9877"
    assert "image.pullPolicy=Never" in access.helm_values


def test_story_namespace_follows_the_values() -> None:
    values = KIND / "values"
    assert kind_access.story_namespace(values / "kind.yaml", None) == "popfleet-e2e"
    assert kind_access.story_namespace(values / "auth-tls.yaml", None) == "popfleet-secure"
    with pytest.raises(kind_access.KindAccessError, match="does not watch"):
        kind_access.story_namespace(values / "auth-tls.yaml", "elsewhere")
    with pytest.raises(kind_access.KindAccessError, match=r"crds.install=false"):
        kind_access.story_namespace(values / "minimal.yaml", None)


def kind_create(config: Path, tmp_path: Path) -> str:
    """``kind create cluster`` with no container engine reachable: kind decodes and
    validates the config first, then fails at the engine; its output."""
    kind = Path.home() / ".cache" / "popfleet" / "kind-v0.29.0" / "kind"
    assert kind.exists(), "kind is missing: `make kind-bin` (a make test prerequisite)"
    env = {
        **os.environ,
        "KIND_EXPERIMENTAL_PROVIDER": "docker",  # never podman or nerdctl
        "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock",  # never a real engine
        "KUBECONFIG": str(tmp_path / "kubeconfig"),
    }
    done = subprocess.run(
        [str(kind), "create", "cluster", "--name", "popfleet-config-check", "--config",
         str(config), "--kubeconfig", str(tmp_path / "kubeconfig")],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode != 0, "kind created a cluster?"
    return done.stdout + done.stderr


def test_kind_itself_accepts_the_cluster_config(tmp_path: Path) -> None:
    out = kind_create(KIND / "kind-config.yaml", tmp_path)
    assert "unable to decode config" not in out and "invalid" not in out.lower(), out
    assert "docker" in out.lower(), out  # it got as far as the engine


def test_kind_refuses_a_broken_config(tmp_path: Path) -> None:
    """The check above can fail: kind reads the config before the engine."""
    config = yaml.safe_load((KIND / "kind-config.yaml").read_text())
    config["networking"]["podSubnett"] = config["networking"].pop("podSubnet")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(config))
    assert "unable to decode config" in kind_create(bad, tmp_path)


def test_a_multi_node_config_is_the_one_node_config_plus_workers(tmp_path: Path) -> None:
    """kind-config.sh N (run.sh --workers N, make e2e-nodes): the same networks and control
    plane, N workers on the same pinned node image; kind itself accepts it."""

    def config(workers: int) -> str:
        done = subprocess.run(
            [str(KIND / "kind-config.sh"), str(workers)], capture_output=True, text=True,
            timeout=30, check=True,
        )  # fmt: skip
        return done.stdout

    assert config(0) == (KIND / "kind-config.yaml").read_text()
    three = yaml.safe_load(config(3))
    one = yaml.safe_load((KIND / "kind-config.yaml").read_text())
    assert three["networking"] == one["networking"]
    assert three["nodes"][0] == one["nodes"][0]
    assert three["nodes"][1:] == [{"role": "worker", "image": one["nodes"][0]["image"]}] * 3
    target = tmp_path / "three.yaml"
    target.write_text(config(3))
    out = kind_create(target, tmp_path)
    assert "unable to decode config" not in out and "invalid" not in out.lower(), out
    bad = subprocess.run(
        [str(KIND / "kind-config.sh"), "three"], capture_output=True, text=True, timeout=30,
        check=False,
    )  # fmt: skip
    assert bad.returncode == 2 and "is a count" in bad.stderr


def test_node_power_acts_on_this_clusters_nodes_only() -> None:
    assert kind_access.kind_cluster_of("popfleet-nodes-control-plane") == "popfleet-nodes"
    for bad in ("popfleet-nodes-worker", "-control-plane", "x-control-plane-y"):
        with pytest.raises(kind_access.KindAccessError):
            kind_access.kind_cluster_of(bad)
    command = kind_access.power_command(
        "kill", "popfleet-nodes-worker2", cluster="popfleet-nodes", labelled="popfleet-nodes"
    )
    assert command == ["docker", "kill", "popfleet-nodes-worker2"]
    with pytest.raises(kind_access.KindAccessError, match="belongs to kind cluster"):
        kind_access.power_command("kill", "db", cluster="popfleet-nodes", labelled="")
    with pytest.raises(kind_access.KindAccessError, match="belongs to kind cluster"):
        kind_access.power_command(
            "start", "popfleet-e2e-control-plane", cluster="popfleet-nodes", labelled="popfleet-e2e"
        )
    with pytest.raises(kind_access.KindAccessError, match="is not one of"):
        kind_access.power_command(
            "rm", "popfleet-nodes-worker", cluster="popfleet-nodes", labelled="popfleet-nodes"
        )
