"""The benchmark smoke tests that need a kube-apiserver (the replicas' Leases) use the
testbed's."""

from __future__ import annotations

from popfleet_testbed.fixtures import testbed, testbed_namespace

__all__ = ["testbed", "testbed_namespace"]
