"""Builders: what a BrokerCluster declares about auth, TLS, POP tuning and metrics reaches
the broker containers as mounts and flags the broker CLI accepts."""

from __future__ import annotations

from typing import Any

from popbroker.roles import popack, revive
from popfleet_operator.builders import statefulsets
from popfleet_operator.model import names, specs


def pod(owner: specs.ObjectRef, raw: dict[str, Any]) -> dict[str, Any]:
    manifest = statefulsets.build(
        owner, specs.parse_cluster(raw), replicas=1, config_hash="h", partition=0
    )
    template: dict[str, Any] = manifest["spec"]["template"]
    return template


def containers(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in template["spec"]["containers"]}


SECURED = {
    "auth": {"credentialsSecret": {"name": "client-keys"}},
    "tls": {"secretName": "broker-tls"},
    "pop": {"ckStayBufferTimeMs": 2500, "ckMaxBufferSize": 1000, "longPollingMaxRequests": 77},
}


def test_credentials_secret_is_mounted_read_only_into_popack_only(owner: specs.ObjectRef) -> None:
    template = pod(owner, SECURED)
    by_name = containers(template)
    popack = by_name["popack"]
    assert {
        "name": "credentials", "mountPath": names.CREDENTIALS_MOUNT, "readOnly": True
    } in popack["volumeMounts"]  # fmt: skip
    assert "--credentials-file=/etc/popfleet-credentials/credentials.yaml" in popack["args"]
    for other in ("store", "revive"):
        assert all(m["name"] != "credentials" for m in by_name[other]["volumeMounts"])
        assert not any(a.startswith("--credentials-file") for a in by_name[other]["args"])
    volume = next(v for v in template["spec"]["volumes"] if v["name"] == "credentials")
    assert volume["secret"] == {
        "secretName": "client-keys",
        "items": [{"key": "credentials.yaml", "path": "credentials.yaml"}],
    }


def test_tls_secret_becomes_the_front_ends_certificate(owner: specs.ObjectRef) -> None:
    template = pod(owner, SECURED)
    by_name = containers(template)
    front = by_name["front"]
    assert "-tls-cert=/etc/popfleet-tls/tls.crt" in front["args"]
    assert "-tls-key=/etc/popfleet-tls/tls.key" in front["args"]
    assert {"name": "tls", "mountPath": names.TLS_MOUNT, "readOnly": True} in front["volumeMounts"]
    # kubelet probes speak no TLS: the client port is probed by TCP connect
    assert front["readinessProbe"]["tcpSocket"] == {"port": names.CLIENT_PORT}
    for other in ("store", "popack", "revive"):  # popack behind the front serves plaintext
        assert all(m["name"] != "tls" for m in by_name[other]["volumeMounts"])
        assert not any("tls" in a for a in by_name[other]["args"])
    volume = next(v for v in template["spec"]["volumes"] if v["name"] == "tls")
    assert volume["secret"]["secretName"] == "broker-tls"
    assert [i["key"] for i in volume["secret"]["items"]] == ["tls.crt", "tls.key"]


def test_without_auth_or_tls_nothing_is_mounted_or_passed(owner: specs.ObjectRef) -> None:
    template = pod(owner, {})
    assert {v["name"] for v in template["spec"]["volumes"]} == {"config", "tmp"}
    by_name = containers(template)
    args = " ".join(by_name["popack"]["args"] + by_name["front"]["args"])
    assert "--credentials-file" not in args
    assert "tls-" not in args


def test_pop_tuning_reaches_popack_flags(owner: specs.ObjectRef) -> None:
    args = containers(pod(owner, SECURED))["popack"]["args"]
    assert "--pop-ck-stay-ms=2500" in args
    assert "--pop-ck-max-buffer=1000" in args
    assert "--max-parked-requests=77" in args


def test_every_role_serves_metrics_on_a_named_port(owner: specs.ObjectRef) -> None:
    template = pod(owner, {})
    for role, container in containers(template).items():
        port = names.METRICS_PORTS[role]
        flag = "-metrics-listen" if role == "front" else "--metrics-listen"  # Go's flag spelling
        assert f"{flag}=$(POD_IP):{port}" in container["args"]
        assert {"name": f"metrics-{role}", "containerPort": port, "protocol": "TCP"} in container[
            "ports"
        ]
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(names.METRICS_PORTS["popack"])
    assert annotations["prometheus.io/path"] == "/metrics"
    assert annotations[names.CONFIG_HASH] == "h"
    assert len({n["containerPort"] for c in containers(template).values() for n in c["ports"]}) == 6


def test_the_broker_cli_accepts_the_popack_and_revive_flags(owner: specs.ObjectRef) -> None:
    by_name = containers(pod(owner, SECURED))
    for role in ("popack", "revive"):
        role_name, *argv = by_name[role]["args"]
        parser = {"popack": popack.parser, "revive": revive.parser}[role_name]()
        args = parser.parse_args(argv)  # exits on an unknown flag
        assert args.metrics_listen == f"$(POD_IP):{names.METRICS_PORTS[role]}"
    popack_args = popack.parser().parse_args(by_name["popack"]["args"][1:])
    settings = popack.popack_settings(popack_args)
    assert settings.buffer.ck_stay_ms == 2500
    assert settings.buffer.max_buffered_cks == 1000
    assert settings.buffer.max_tracked_cks >= settings.buffer.max_buffered_cks
    assert settings.max_parked_requests == 77
