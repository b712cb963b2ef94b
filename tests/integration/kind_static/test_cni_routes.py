"""The offline node image's CNI stand-in (``offline/images/cni/popfleet-cni``): which routes
it plans from a NodeList, which of its routes it removes, and what its DaemonSet may do.

The script's ``plan`` and ``stale`` modes are its pure parts; they run here with bash and
jq (Debian's, as in the image). Nothing here touches this machine's routes.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import yaml

from tests.integration.kind_static.conftest import KIND

CNI = KIND / "offline" / "images" / "cni" / "popfleet-cni"


def _node(name: str, cidr: str | None, *addresses: tuple[str, str]) -> dict[str, object]:
    spec = {"podCIDR": cidr} if cidr else {}
    return {
        "metadata": {"name": name},
        "spec": spec,
        "status": {"addresses": [{"type": t, "address": a} for t, a in addresses]},
    }


def _run(*args: str, stdin: str) -> str:
    assert shutil.which("jq"), "jq is missing (Debian's jq, as in the CNI image)"
    done = subprocess.run(
        ["bash", str(CNI), *args], input=stdin, capture_output=True, text=True, timeout=30,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_route_to_every_other_nodes_pod_network_via_its_internal_ip() -> None:
    nodes = {
        "items": [
            _node("c-worker2", "10.244.2.0/24", ("InternalIP", "172.18.0.4"),
                  ("Hostname", "c-worker2")),
            _node("c-control-plane", "10.244.0.0/24", ("InternalIP", "172.18.0.2")),
            _node("c-worker", "10.244.1.0/24", ("Hostname", "c-worker"),
                  ("InternalIP", "fc00:f853::3"), ("InternalIP", "172.18.0.3")),
        ]
    }  # fmt: skip
    planned = _run("plan", "c-control-plane", stdin=json.dumps(nodes))
    assert planned.splitlines() == ["10.244.1.0/24 172.18.0.3", "10.244.2.0/24 172.18.0.4"]
    planned = _run("plan", "c-worker", stdin=json.dumps(nodes))
    assert planned.splitlines() == ["10.244.0.0/24 172.18.0.2", "10.244.2.0/24 172.18.0.4"]


def test_nodes_without_a_pod_network_or_an_address_get_no_route() -> None:
    nodes = {
        "items": [
            _node("a", "10.244.0.0/24", ("InternalIP", "172.18.0.2")),
            _node("b", None, ("InternalIP", "172.18.0.3")),  # not allocated a podCIDR yet
            _node("c", "10.244.2.0/24", ("Hostname", "c")),  # no InternalIP reported yet
        ]
    }
    assert _run("plan", "a", stdin=json.dumps(nodes)) == ""


def test_one_node_plans_nothing() -> None:
    nodes = {"items": [_node("only", "10.244.0.0/24", ("InternalIP", "172.18.0.2"))]}
    assert _run("plan", "only", stdin=json.dumps(nodes)) == ""


def test_only_routes_no_node_has_any_more_are_stale() -> None:
    routes = "10.244.1.0/24 via 172.18.0.3 dev eth0 \n10.244.3.0/24 via 172.18.0.9 dev eth0 \n"
    planned = "10.244.1.0/24 172.18.0.5\n10.244.2.0/24 172.18.0.4"
    # 10.244.1.0/24 is still planned (its address changed: replaced, not removed)
    assert _run("stale", planned, stdin=routes).splitlines() == ["10.244.3.0/24"]
    assert _run("stale", "", stdin=routes).splitlines() == ["10.244.1.0/24", "10.244.3.0/24"]
    assert _run("stale", planned, stdin="") == ""


def test_the_daemonset_may_change_the_nodes_routes_and_keeps_pod_addresses() -> None:
    """NET_ADMIN on the host network (routes, the masquerade rule); ptp's own ipMasq off, so
    pod-to-pod traffic between nodes keeps its source (what NetworkPolicy matches on)."""
    manifest = (KIND / "offline" / "manifests" / "default-cni.yaml").read_text()
    docs = [d for d in yaml.safe_load_all(manifest.replace("{{ .PodSubnet }}", "10.244.0.0/16"))]
    (ds,) = [d for d in docs if d and d["kind"] == "DaemonSet"]
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    assert pod["tolerations"] == [{"operator": "Exists"}]  # every node, the control plane too
    (container,) = pod["containers"]
    assert "NET_ADMIN" in container["securityContext"]["capabilities"]["add"]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/etc/cni/net.d", "/run/xtables.lock"} <= mounts
    (rule,) = [d for d in docs if d and d["kind"] == "ClusterRole"]
    assert rule["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]}
    ]
    script = CNI.read_text()
    assert '"ptp", ipMasq: false' in script
    assert '! -d "${POD_SUBNET:?POD_SUBNET must be set}"' in script
