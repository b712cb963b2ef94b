"""The kubelet's pure rules: image names, path rewriting, env building, probe bookkeeping."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from popfleet_testbed import errors, images, podenv, probes, volumes, waiting

pytestmark = pytest.mark.timeout(10)


@pytest.mark.parametrize(
    ("image", "repo"),
    [
        ("popfleet/broker", "popfleet/broker"),
        ("popfleet/broker:0.1.0", "popfleet/broker"),
        ("ghcr.io/popfleet/broker:0.1.0@sha256:abcd", "popfleet/broker"),
        ("localhost:5000/popfleet/operator", "popfleet/operator"),
        ("docker.io/library/busybox:1.36", "busybox"),
        ("busybox", "busybox"),
    ],
)
def test_repository_drops_registry_tag_and_digest(image: str, repo: str) -> None:
    assert images.repository(image) == repo


def test_argv_follows_entrypoint_cmd_rules() -> None:
    env = {"MODE": "POP", "PATH": "/usr/bin:/bin"}
    probe = "popfleet/testbed-probe"
    assert images.argv(probe, command=None, args=None, env=env)[1:] == [
        "-m",
        "popfleet_testbed.testimage",
        "serve",
    ]
    assert images.argv(probe, command=None, args=["exit", "$(MODE)"], env=env)[-2:] == [
        "exit",
        "POP",
    ]
    assert images.argv(probe, command=["python", "-c", "$$x"], args=None, env=env) == [
        str(Path(sys.executable).parent / "python"),
        "-c",
        "$x",
    ]
    with pytest.raises(errors.TestbedError, match="not in the testbed image table"):
        images.argv("nginx", command=None, args=None, env=env)


def test_rewriter_maps_mount_paths_in_words() -> None:
    mounts = [
        volumes.Mount("/var/lib/data", Path("/s/pvc-1"), read_only=False),
        volumes.Mount("/data", Path("/s/empty"), read_only=False),
    ]
    rewrite = volumes.rewriter(mounts)
    assert rewrite("/data") == "/s/empty"
    assert rewrite("/data/x.log") == "/s/empty/x.log"
    assert rewrite("--dir=/var/lib/data/store") == "--dir=/s/pvc-1/store"
    assert rewrite("/database") == "/database"
    assert rewrite("--x=/datafile") == "--x=/datafile"
    assert rewrite("--listen=unix:/data/popack.sock") == "--listen=unix:/s/empty/popack.sock"
    assert rewrite("-upstream=unix:///data/popack.sock") == "-upstream=unix:///s/empty/popack.sock"
    assert rewrite("--listen=unix:/datafile") == "--listen=unix:/datafile"


class _Sources:
    def configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        return {"data": {"mode": "POP"}} if name == "cfg" else None

    def secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None


def test_env_order_expansion_and_missing_references() -> None:
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"a": "b"}},
        "spec": {"nodeName": "n"},
    }
    container: dict[str, Any] = {
        "envFrom": [{"configMapRef": {"name": "cfg"}}],
        "env": [
            {"name": "WHO", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['a']"}}},
            {"name": "MSG", "value": "$(WHO) in $(mode) $(NOPE)"},
            {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
            {
                "name": "OPT",
                "valueFrom": {"secretKeyRef": {"name": "s", "key": "k", "optional": True}},
            },
        ],
    }
    env = podenv.container_env(
        pod, container, sources=_Sources(), pod_ip="127.0.1.9", api_port=6443, base={}
    )
    assert env["MSG"] == "b in POP $(NOPE)"
    assert env["CPU"] == podenv.NODE_ALLOCATABLE["cpu"]
    assert env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"
    assert "OPT" not in env
    container["env"].append({"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}})
    with pytest.raises(errors.NotReadyYet):
        podenv.container_env(
            pod, container, sources=_Sources(), pod_ip="127.0.1.9", api_port=6443, base={}
        )


def test_probe_thresholds() -> None:
    state = probes.ProbeState(
        spec={"periodSeconds": 1, "successThreshold": 2, "failureThreshold": 2},
        started_mono=100.0,
    )
    assert state.due(100.0)
    outcomes = []
    for ok, when in [(True, 100.0), (True, 101.0), (False, 102.0), (False, 103.0)]:
        state.record(ok, when)
        outcomes.append((state.passed, state.failed))
    assert not state.due(103.5)
    assert outcomes == [(False, False), (True, False), (True, False), (False, True)]


def test_grpc_health_response_decoding() -> None:
    assert probes._grpc_serving(b"\x08\x01")
    assert not probes._grpc_serving(b"\x08\x02")
    assert not probes._grpc_serving(b"")


def test_a_timed_out_wait_reports_what_it_saw() -> None:
    with pytest.raises(errors.Timeout, match=r"waiting for the thing\n2 pods, none ready$"):
        waiting.until(lambda: None, timeout_s=0, what="the thing",
                      state=lambda: "2 pods, none ready")  # fmt: skip


def test_a_wait_whose_state_fails_still_times_out() -> None:
    def unreadable() -> str:
        raise errors.TestbedError("apiserver gone")

    with pytest.raises(errors.Timeout, match=r"state unavailable: apiserver gone"):
        waiting.until(lambda: False, timeout_s=0, what="the thing", state=unreadable)
