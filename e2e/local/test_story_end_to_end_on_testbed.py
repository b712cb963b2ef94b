"""The whole user story (DESIGN §1) on the local testbed, through ``popfleet_e2e.scenario``.

One test, because the steps build on each other (the hung consumer of step 4 is the one
whose backlog drains in step 7). The scenario is the same code e2e/kind runs; here the
resolver is loopback-only (pod IPs are 127.x addresses) and kubectl/helm are the testbed's.
Timeout: measured 5 min on the loaded 2-core CI machine; see e2e/local/README.md.
"""

from __future__ import annotations

import pytest

from popfleet_e2e import lifecycle, scenario
from popfleet_e2e import testbed as testbed_access
from popfleet_testbed import cluster


@pytest.mark.timeout(900)
def test_story_end_to_end(testbed: cluster.Cluster) -> None:
    namespace = testbed.new_namespace("e2e")
    access = testbed_access.access(testbed.info, namespace)
    try:
        timings = scenario.run(access)
    finally:
        leftovers = lifecycle.clean_up(access)
        testbed.delete_namespace(namespace)
    assert leftovers == []
    assert list(timings) == [step.title for step in scenario.FULL]
    print(f"e2e/local: {sum(timings.values()):.0f}s in all; per step: {timings}")
