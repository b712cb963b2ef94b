"""The replication tests that need a real kube-apiserver use the testbed's."""

from __future__ import annotations

from popfleet_testbed.fixtures import testbed, testbed_namespace

__all__ = ["testbed", "testbed_namespace"]
