"""A pod's in-cluster client authenticates with its projected token and RBAC is enforced."""

from __future__ import annotations

import pytest
import testbed_manifests as m

from popfleet_testbed.cluster import Cluster

pytestmark = pytest.mark.timeout(120)


def test_pod_service_account_is_allowed_and_denied_by_rbac(
    testbed: Cluster, testbed_namespace: str
) -> None:
    ns = testbed_namespace
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "pod-reader"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "pod-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}],
    }
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader"}}
    checks = [
        f"/api/v1/namespaces/{ns}/pods=200",  # granted by the Role
        f"/api/v1/namespaces/{ns}/secrets=403",  # not granted
        "/api/v1/nodes=403",  # cluster-scoped, not granted
    ]
    args = ["kube-get", *(a for c in checks for a in ("--check", c))]
    # OnFailure: a retry covers the moment before the RoleBinding reaches the authorizer cache.
    pod = m.pod("client", args=args, restart_policy="OnFailure", serviceAccountName="reader")
    testbed.apply(ns, account, role, binding, pod)
    done = testbed.wait_phase(ns, "client", "Succeeded", timeout_s=60)
    log = testbed.log(done)
    for check in checks:
        path, _, status = check.rpartition("=")
        assert f"{path} {status}" in log
    # The same log through the apiserver and the kubelet's log endpoint.
    assert testbed.kubectl("logs", "-n", ns, "client") == log
