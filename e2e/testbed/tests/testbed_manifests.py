"""Manifests of the test image (popfleet/testbed-probe) used by the testbed's own tests."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

IMAGE = "registry.invalid/popfleet/testbed-probe:test"


def probe_container(*, readiness: bool = True, args: list[str] | None = None) -> Obj:
    container: Obj = {
        "name": "probe",
        "image": IMAGE,
        "env": [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "DATA_DIR", "value": "/data"},
        ],
        "ports": [{"name": "http", "containerPort": 8080}],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }
    if readiness:
        container["readinessProbe"] = {
            "httpGet": {"path": "/ready", "port": "http"},
            "periodSeconds": 1,
            "failureThreshold": 1,
        }
    if args is not None:
        container["args"] = args
    return container


def deployment(name: str, replicas: int) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "containers": [probe_container()],
                    "volumes": [{"name": "data", "emptyDir": {}}],
                },
            },
        },
    }


def statefulset(name: str, replicas: int) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"terminationGracePeriodSeconds": 5, "containers": [probe_container()]},
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}},
                    },
                }
            ],
        },
    }


def pod(name: str, *, args: list[str], restart_policy: str = "Never", **spec: Any) -> Obj:
    container = probe_container(readiness=False, args=args)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "restartPolicy": restart_policy,
            "containers": [container],
            "volumes": [{"name": "data", "emptyDir": {}}],
            **spec,
        },
    }
