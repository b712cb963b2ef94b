"""How the shared e2e scenario (``popfleet_e2e``) reaches a kind cluster.

Why: the scenario is written once against a ``ClusterAccess`` (kubeconfig, kubectl/helm, an
endpoint resolver, extra Helm values). On the local testbed pod IPs are loopback addresses;
on kind they are addresses of the kind node's pod network (``podSubnet`` in
``kind-config.yaml``), which the host cannot dial, and the brokers' NetworkPolicy admits
their admin port only from operator pods. The official RocketMQ client dials the endpoints
that routes advertise (pod IPs), so a per-broker ``kubectl port-forward`` cannot serve it
either. Instead ``proxy_tunnel`` runs a CONNECT proxy in a pod labelled like the operator and
sets ``grpc_proxy`` for this process: every gRPC channel goes through it. The resolver here
checks that an endpoint lies inside the pod network before anything dials it.

Network safety (a hard rule on our machines): the host never dials pod (10.244.0.0/16) or
service (10.96.0.0/16) addresses itself. So the kind access refuses to resolve anything
until it goes through the tunnel (``through_proxy``, once ``proxy_tunnel`` is up): its
resolver raises while the access has no proxy, the proxy is not a loopback port-forward,
the environment's ``grpc_proxy`` (what the official client uses) is not that proxy, or
``no_grpc_proxy``/``no_proxy`` could exempt a pod address from it (``proxy_problem``). The
admin client gets the proxy explicitly (``ClusterAccess.grpc_proxy``).

Run by ``e2e/kind/run.sh`` (``make e2e-kind``)::

    python e2e/kind/kind_access.py --kubeconfig K --bin-dir D --values e2e/kind/values/kind.yaml

The pure parts (``pod_network_resolver``, ``proxy_problem``, ``helm_sets``,
``story_namespace``) are tested in ``tests/integration/kind_static``; nothing in ``make test``
dials a pod IP (``test_kind_host_clients_use_the_proxy.py`` records the channels instead)."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import ipaddress
import json
import os
import subprocess
import sys
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

KIND_DIR = Path(__file__).resolve().parent
DEFAULT_NAMESPACE = "popfleet-e2e"


class KindAccessError(ValueError):
    """An endpoint or a values file the kind run cannot use; the message says why."""


def pod_subnet(config: Path = KIND_DIR / "kind-config.yaml", key: str = "podSubnet") -> str:
    """The pod network (or, with ``key="serviceSubnet"``, the service network) of the cluster."""
    subnet = (yaml.safe_load(config.read_text()).get("networking") or {}).get(key)
    if not subnet:
        raise KindAccessError(f"{config}: networking.{key} is not set")
    return str(subnet)


def cluster_networks(config: Path = KIND_DIR / "kind-config.yaml") -> str:
    """``pods,services``: what the scenario may reach, only ever through the proxy pod (the
    brokers' pod IPs, and their client Service's ClusterIP as the clients' bootstrap)."""
    return f"{pod_subnet(config)},{pod_subnet(config, 'serviceSubnet')}"


def proxy_problem(proxy: str | None, environ: Mapping[str, str]) -> str | None:
    """Why gRPC channels of a process with ``environ`` might not all go through ``proxy``.

    None when they all do: the admin client is given ``proxy`` explicitly, the official
    client reads ``grpc_proxy`` from the environment, and gRPC lets ``no_grpc_proxy`` (else
    ``no_proxy``) exempt hosts, by CIDR or by a suffix of the address text, from either.
    """
    if not proxy:
        return "no proxy: the host reaches pods only through the proxy pod (proxy_tunnel)"
    url = urllib.parse.urlsplit(proxy)
    try:
        loopback = url.scheme == "http" and url.port is not None
        loopback = loopback and ipaddress.ip_address(url.hostname or "").is_loopback
    except ValueError:  # no IP address, or a bad port
        loopback = False
    if not loopback:
        return f"proxy {proxy!r} is not the port-forward on loopback (http://127.x.y.z:PORT)"
    if environ.get("grpc_proxy") != proxy:
        found = environ.get("grpc_proxy")
        return f"grpc_proxy is {found!r}, not {proxy!r}: the official client would not use it"
    exempt = environ["no_grpc_proxy"] if "no_grpc_proxy" in environ else environ.get("no_proxy")
    if exempt:
        return f"no_grpc_proxy/no_proxy {exempt!r} could exempt pod addresses from the proxy"
    return None


def pod_network_resolver(
    subnet: str, *, proxy: str | None = None, environ: Mapping[str, str] = os.environ
) -> Callable[[str], str]:
    """A resolver that passes ``host:port`` through when ``host`` is in the pod network (one
    or several comma-separated networks) and every gRPC channel of this process goes through
    ``proxy`` (else it raises)."""
    networks = [ipaddress.ip_network(part) for part in subnet.split(",")]

    def resolve(endpoint: str) -> str:
        problem = proxy_problem(proxy, environ)
        if problem is not None:
            raise KindAccessError(f"refusing to dial {endpoint}: {problem}")
        host, sep, port = endpoint.rpartition(":")
        if not sep or not port.isdigit():
            raise KindAccessError(f"{endpoint!r} is not host:port")
        try:
            address = ipaddress.ip_address(host)
        except ValueError as exc:
            raise KindAccessError(f"{endpoint!r}: {host!r} is not an IP address") from exc
        if not any(address in network for network in networks):
            raise KindAccessError(f"refusing to dial {endpoint}: not in the pod network {subnet}")
        return endpoint

    return resolve


def through_proxy(access: Any, *, subnet: str, proxy: str) -> Any:
    """The kind ``ClusterAccess`` once the tunnel is up: admin calls and resolving go through
    ``proxy`` (the official client through ``grpc_proxy``, which ``proxy_tunnel`` exports)."""
    return dataclasses.replace(
        access, grpc_proxy=proxy, resolve=pod_network_resolver(subnet, proxy=proxy)
    )


def _scalar(value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        text = str(value)
        if any(c in text for c in ",={}"):
            raise KindAccessError(f"{where}: {text!r} cannot be passed as --set")
        return text
    raise KindAccessError(f"{where}: {type(value).__name__} values cannot be passed as --set")


def _flatten(prefix: str, value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        if not value:
            return
        for key, item in value.items():
            yield from _flatten(f"{prefix}.{key}" if prefix else str(key), item)
    elif isinstance(value, list):
        items = ",".join(_scalar(v, prefix) for v in value)
        yield f"{prefix}={{{items}}}"
    else:
        yield f"{prefix}={_scalar(value, prefix)}"


def helm_sets(values_file: Path) -> tuple[str, ...]:
    """A chart values file as ``helm --set`` pairs (the scenario's ``helm_values``)."""
    values = yaml.safe_load(values_file.read_text()) or {}
    if not isinstance(values, dict):
        raise KindAccessError(f"{values_file}: a values file is a mapping")
    return tuple(_flatten("", values))


def story_namespace(values_file: Path, requested: str | None) -> str:
    """Where the story runs with these chart values: a namespace the operator watches.

    The scenario installs the chart itself, so values that keep the CRDs out of the release
    cannot run it (they are for the static checks and manual installs).
    """
    values = yaml.safe_load(values_file.read_text()) or {}
    if (values.get("crds") or {}).get("install") is False:
        raise KindAccessError(f"{values_file}: crds.install=false; the scenario needs the CRDs")
    watched = list((values.get("operator") or {}).get("watchNamespaces") or [])
    if requested is None:
        return str(watched[0]) if watched else DEFAULT_NAMESPACE
    if watched and requested not in watched:
        raise KindAccessError(f"{values_file}: the operator does not watch {requested!r}")
    return requested


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--bin-dir", type=Path, required=True, help="kubectl and helm")
    parser.add_argument("--values", type=Path, default=KIND_DIR / "values" / "kind.yaml")
    parser.add_argument("--namespace", help=f"default: a watched one, else {DEFAULT_NAMESPACE}")
    parser.add_argument("--node", required=True, help="the kind node's container (docker exec)")
    parser.add_argument("--next-broker-image", required=True, help="loaded, for the upgrade step")
    parser.add_argument(
        "--spark-operator", type=Path,
        help="sparkoperator/build.sh's directory (crds.yaml); its image is loaded",
    )  # fmt: skip
    parser.add_argument(
        "--monitoring-bundle", type=Path,
        help="prometheus-operator's bundle.yaml (its images are loaded)",
    )  # fmt: skip
    parser.add_argument("--prometheus-image", help="loaded; its tag is the version (v3.16.0)")
    parser.add_argument(
        "--node-power", action="store_true",
        help="let the scenario docker kill/start this cluster's node containers (make e2e-nodes)",
    )  # fmt: skip
    parser.add_argument("--keda-config", type=Path, help="KEDA's config/ (make keda-bin)")
    parser.add_argument("--keda-images", help="OPERATOR,ADAPTER: KEDA's images, loaded")
    args = parser.parse_args(argv)
    try:
        namespace = story_namespace(args.values, args.namespace)
        sets = helm_sets(args.values)
    except KindAccessError as exc:
        print(f"e2e-kind: {exc}", file=sys.stderr)
        return 2

    if (args.monitoring_bundle is None) != (args.prometheus_image is None):
        print("e2e-kind: --monitoring-bundle and --prometheus-image go together", file=sys.stderr)
        return 2
    operator, _, adapter = (args.keda_images or ",").partition(",")
    if (args.keda_config is None) != (not args.keda_images):
        print("e2e-kind: --keda-config and --keda-images go together", file=sys.stderr)
        return 2
    from popfleet_e2e.access import (  # noqa: PLC0415
        ClusterAccess,
        KedaBuild,
        MonitoringBuild,
        SparkOperatorBuild,
    )

    tunnels = importlib.import_module("proxy_tunnel")  # beside this file (run as a script)

    subnet = cluster_networks()
    access = ClusterAccess(
        kubeconfig=args.kubeconfig,
        namespace=namespace,
        resolve=pod_network_resolver(subnet),
        bin_dir=args.bin_dir,
        helm_values=sets,
        node_exec=node_runner(args.node),
        next_broker_image=args.next_broker_image,
        node_power=node_power(kind_cluster_of(args.node)) if args.node_power else None,
        spark_operator=None
        if args.spark_operator is None
        else SparkOperatorBuild(
            crds=args.spark_operator / "crds.yaml",
            manifests=KIND_DIR / "sparkoperator" / "manifests.yaml",
        ),
        monitoring=None
        if args.monitoring_bundle is None or args.prometheus_image is None
        else MonitoringBuild(bundle=args.monitoring_bundle, prometheus_image=args.prometheus_image),
        keda=None
        if args.keda_config is None
        else KedaBuild(config=args.keda_config, operator_image=operator, adapter_image=adapter),
        bootstrap_via_service=True,
    )
    image = (yaml.safe_load(args.values.read_text()) or {})["image"]
    tunnel = tunnels.Tunnel(args.bin_dir / "kubectl", args.kubeconfig)
    try:
        proxy = tunnel.open(
            tunnels.manifests(
                image=f"{image['repository']}:{image['tag']}",
                pull_policy=image.get("pullPolicy", "Never"),
                allow_cidr=subnet,
                node=args.node if args.node_power else None,
            )
        )
        print(f"e2e-kind: gRPC to pods through {proxy} (proxy pod in the cluster)", flush=True)
        return run_scenario(through_proxy(access, subnet=subnet, proxy=proxy))
    finally:
        tunnel.close()


def node_runner(container: str) -> Callable[[Sequence[str]], str]:
    """``docker exec`` on the kind node: root in the node, whose PID namespace holds the pods'."""
    from popfleet_e2e.access import ScenarioError  # noqa: PLC0415 - only for a real run

    def run(command: Sequence[str]) -> str:
        done = subprocess.run(
            ["docker", "exec", container, *command],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise ScenarioError(f"on {container}: {' '.join(command)}: {done.stderr.strip()}")
        return done.stdout

    return run


def kind_cluster_of(node: str) -> str:
    """The kind cluster whose control-plane node container is ``node``
    (``<cluster>-control-plane``)."""
    cluster, sep, rest = node.rpartition("-control-plane")
    if not sep or rest or not cluster:
        raise KindAccessError(
            f"{node!r} is not a kind control-plane node (<cluster>-control-plane)"
        )
    return cluster


KIND_CLUSTER_LABEL = "io.x-k8s.kind.cluster"
POWER_ACTIONS = ("kill", "start")


def power_command(action: str, node: str, *, cluster: str, labelled: str) -> list[str]:
    """The ``docker`` command that kills or starts ``node``, refused unless the container's
    kind cluster label (``labelled``) is ``cluster``: the scenario powers off its own nodes
    only, never another container of this machine."""
    if action not in POWER_ACTIONS:
        raise KindAccessError(f"node power: {action!r} is not one of {POWER_ACTIONS}")
    if labelled != cluster:
        raise KindAccessError(
            f"node power: {node!r} belongs to kind cluster {labelled!r}, not {cluster!r}"
        )
    return ["docker", action, node]


def node_power(cluster: str) -> Callable[[str, str], None]:
    """``docker kill``/``docker start`` of a node container of ``cluster`` (checked first)."""
    from popfleet_e2e.access import ScenarioError  # noqa: PLC0415 - only for a real run

    def docker(*args: str) -> str:
        done = subprocess.run(
            ["docker", *args], capture_output=True, text=True, timeout=120, check=False
        )
        if done.returncode != 0:
            raise ScenarioError(f"docker {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout.strip()

    def power(action: str, node: str) -> None:
        template = f'{{{{index .Config.Labels "{KIND_CLUSTER_LABEL}"}}}}'
        labelled = docker("inspect", "-f", template, node)
        try:
            command = power_command(action, node, cluster=cluster, labelled=labelled)
        except KindAccessError as exc:
            raise ScenarioError(str(exc)) from exc
        docker(*command[1:])

    return power


def run_scenario(access: Any) -> int:
    """Run the shared scenario (the same code e2e/local runs) against ``access``; exit code.

    The story's namespace is created first; whatever the run leaves is cleaned up after it,
    failed or not, and a leftover fails the run as in e2e/local.
    """
    from popfleet_e2e import lifecycle, scenario  # noqa: PLC0415 - only for a real run
    from popfleet_e2e.access import ScenarioError  # noqa: PLC0415

    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": access.namespace}}
    access.kubectl("apply", "-f", "-", stdin=json.dumps(namespace))
    passed = 0

    def say(line: str) -> None:
        nonlocal passed
        print(line, flush=True)
        passed += line.lstrip().startswith("ok in ")

    try:
        chosen = scenario.SCENARIOS[os.environ.get("POPFLEET_E2E_SCENARIO", "kind")]
        timings = scenario.run(access, chosen=chosen, say=say)
    except ScenarioError as exc:
        print(f"e2e-kind: FAILED: {exc}", file=sys.stderr, flush=True)
        print(f"e2e-kind: {passed} passed, 1 failed", flush=True)
        return 1
    finally:
        leftovers = lifecycle.clean_up(access)
        for item in leftovers:
            print(f"e2e-kind: left behind: {item}", file=sys.stderr)
    if leftovers:
        print(f"e2e-kind: {len(timings)} passed, 1 failed", flush=True)  # the clean-up failed
        return 1
    print(f"e2e-kind: {len(timings)} steps passed in {sum(timings.values()):.0f}s")
    print(f"e2e-kind: {len(timings)} passed, 0 failed", flush=True)  # CI's plain closing line
    return 0


if __name__ == "__main__":
    code = main()
    # The official client's consumption threads (not daemons) may still be retrying an ack to
    # a broker pod the story replaced (see Traffic.stop); they would hold the interpreter's
    # exit for many minutes. Everything the run reports is printed by now.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
