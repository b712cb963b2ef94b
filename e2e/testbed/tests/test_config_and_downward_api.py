"""ConfigMap/Secret env and volumes, downward API env and files, as the kubelet builds them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import testbed_manifests as m

from popfleet_testbed.cluster import Cluster

pytestmark = pytest.mark.timeout(120)


def test_env_and_files_from_config_secret_and_downward_api(
    testbed: Cluster, testbed_namespace: str
) -> None:
    ns = testbed_namespace
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cfg"},
        "data": {"mode": "POP", "app.conf": "x=1\n"},
    }
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "sec"},
        "stringData": {"token": "s3cret"},
    }
    pod = m.pod("cfg", args=["serve"], restart_policy="Always")
    pod["metadata"]["labels"]["tier"] = "test"
    c = pod["spec"]["containers"][0]
    c["resources"] = {"limits": {"memory": "64Mi", "cpu": "500m"}}
    c["env"] += [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {
            "name": "MEM_MI",
            "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}},
        },
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "token"}}},
        {"name": "GREETING", "value": "mode is $(MODE)"},
    ]
    c["envFrom"] = [{"configMapRef": {"name": "cfg"}, "prefix": "CFG_"}]
    c["env"].insert(
        0, {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}}
    )
    c["volumeMounts"] += [
        {"name": "cfg", "mountPath": "/etc/app"},
        {"name": "sec", "mountPath": "/etc/secret", "readOnly": True},
        {"name": "info", "mountPath": "/etc/podinfo"},
    ]
    pod["spec"]["volumes"] += [
        {"name": "cfg", "configMap": {"name": "cfg"}},
        {"name": "sec", "secret": {"secretName": "sec"}},
        {
            "name": "info",
            "downwardAPI": {
                "items": [
                    {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                    {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
                ]
            },
        },
    ]
    c["readinessProbe"] = {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 1}
    testbed.apply(ns, cm, secret, pod)
    [running] = testbed.wait_ready(ns, "app=cfg", 1)
    env = json.loads(testbed.http(running, "/env"))
    assert env["POD_NAME"] == "cfg"
    assert env["POD_NAMESPACE"] == ns
    assert env["POD_IP"] == running["status"]["podIP"]
    assert env["MEM_MI"] == "64"
    assert env["TOKEN"] == "s3cret"
    assert env["CFG_mode"] == "POP"
    assert env["GREETING"] == "mode is POP"
    root = env["POPFLEET_TESTBED_ROOT"]
    assert Path(f"{root}/etc/app/app.conf").read_text() == "x=1\n"
    assert Path(f"{root}/etc/secret/token").read_text() == "s3cret"
    assert 'tier="test"' in Path(f"{root}/etc/podinfo/labels").read_text()
    sa_dir = env["POPFLEET_SERVICEACCOUNT_DIR"]
    assert Path(f"{sa_dir}/namespace").read_text() == ns
    assert Path(f"{sa_dir}/ca.crt").read_text().startswith("-----BEGIN CERTIFICATE-----")
