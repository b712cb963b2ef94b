"""Operator tests on the local testbed (real kube-apiserver, process kubelet, real Helm)."""

from popfleet_testbed.fixtures import testbed, testbed_namespace

__all__ = ["testbed", "testbed_namespace"]
