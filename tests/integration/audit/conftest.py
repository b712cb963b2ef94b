"""Audit integration tests: PySpark local[2] against live broker processes, and status
patches on the testbed's real kube-apiserver.

The official client's local-IP probe is pre-seeded with 127.0.0.1 (as in the
broker tests) so nothing but loopback is touched.
"""

from rocketmq.v5.util.misc import Misc

from popfleet_testbed.fixtures import testbed, testbed_namespace
from tests.audit_spark import spark

Misc._Misc__LOCAL_IP = "127.0.0.1"

__all__ = ["spark", "testbed", "testbed_namespace"]
