"""The scenario's pure parts, without a cluster: table parsing, the upgraded chart, log rules.

Cheap checks that fail early (and with a clear message) when something the scenario relies
on changes shape, e.g. the ConsumerGroup CRD template the upgrade step edits.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from popfleet_audit import jobs
from popfleet_e2e import auditing, lifecycle, logs, operatorfaults, steps
from popfleet_e2e.access import REPO, ScenarioError, loopback_only

LISTING = """\
NAME      MODE   SHARE   SYNCED   LAG   BACKLOG   AGE
billing   POP    1       3/3                      14s
other     PULL   0       3/3      12    4         2m
"""


def test_printed_columns_keep_blank_cells_blank() -> None:
    rows = steps.printed_columns(LISTING)
    assert [(r["NAME"], r["MODE"], r["LAG"], r["BACKLOG"]) for r in rows] == [
        ("billing", "POP", "", ""),
        ("other", "PULL", "12", "4"),
    ]


def _without_template_lines(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if "{{" not in line)


def test_upgraded_chart_copy_bumps_version_and_adds_one_optional_field(tmp_path: Path) -> None:
    copy = lifecycle.upgraded_chart_copy(REPO / "charts" / "popfleet", tmp_path)
    chart = yaml.safe_load((copy / "Chart.yaml").read_text())
    assert chart["version"] == lifecycle.UPGRADE_VERSION
    crd = yaml.safe_load(_without_template_lines((copy / lifecycle.GROUP_CRD_TEMPLATE).read_text()))
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert schema["properties"][lifecycle.NEW_FIELD]["type"] == "string"
    assert lifecycle.NEW_FIELD not in schema.get("required", [])
    original = (REPO / "charts" / "popfleet" / lifecycle.GROUP_CRD_TEMPLATE).read_text()
    assert lifecycle.NEW_FIELD + ":" not in original


def test_log_rules_flag_errors_and_tracebacks_but_not_retries() -> None:
    text = "\n".join(
        [
            "2026-11-21 14:00:00 INFO popbroker.store: started",
            "2026-11-21 14:00:01 ERROR kopf.objects: Handler 'x' failed temporarily: later",
            "2026-11-21 14:00:02 ERROR popbroker.grpc: boom",
            "2026-11-21 14:00:03 WARNING popbroker.replicator: round failed",
            "Traceback (most recent call last):",
            '  File "replica.py", line 1, in round',
            "    raise ValueError('x')",
            "ValueError: x",
            "2026-11-21 14:00:04 INFO popbroker.store: still running",
        ]
    )
    assert logs.unexpected(text) == [
        "2026-11-21 14:00:02 ERROR popbroker.grpc: boom",
        "\n    ".join(
            [
                "2026-11-21 14:00:03 WARNING popbroker.replicator: round failed",
                "Traceback (most recent call last):",
                '  File "replica.py", line 1, in round',
                "    raise ValueError('x')",
                "ValueError: x",
            ]
        ),
    ]


def test_the_testbed_resolver_never_dials_outside_loopback() -> None:
    assert loopback_only("127.83.1.4:8081") == "127.83.1.4:8081"
    with pytest.raises(ScenarioError, match="non-loopback"):
        loopback_only("10.244.0.7:8081")


def test_the_fault_fleet_pairs_each_group_with_its_own_topic() -> None:
    objs = operatorfaults.manifests(3)
    topics = [o["metadata"]["name"] for o in objs if o["kind"] == "Topic"]
    reads = [o["spec"]["topics"][0]["name"] for o in objs if o["kind"] == "ConsumerGroup"]
    assert topics == reads == ["fleet-t0", "fleet-t1", "fleet-t2"]
    assert all(o["metadata"]["labels"] == {operatorfaults.LABEL: "fleet"} for o in objs)


def test_a_fleet_object_converges_only_for_its_current_generation() -> None:
    synced = {"type": "TopicSynced", "status": "True", "observedGeneration": 2}
    topic = {"kind": "Topic", "metadata": {"generation": 2}, "status": {"conditions": [synced]}}
    assert operatorfaults.converged(topic)
    assert not operatorfaults.converged({**topic, "metadata": {"generation": 3}})
    assert not operatorfaults.converged({**topic, "kind": "ConsumerGroup"})  # wants ModeApplied


def test_log_lines_are_tied_to_objects_by_kopfs_prefix() -> None:
    text = (
        "2026 INFO kopf.objects: [e2e/fleet-t1] Handler 'changed' succeeded.\n"
        "2026 INFO kopf.objects: [other/fleet-t1] Handler 'changed' succeeded.\n"
        "2026 INFO popfleet: fleet-t1 mentioned without the prefix\n"
    )
    found = operatorfaults.lines_naming(text, "e2e", ["fleet-t1", "fleet-g1"])
    assert found == ["2026 INFO kopf.objects: [e2e/fleet-t1] Handler 'changed' succeeded."]


def test_the_kind_step_reads_the_audits_revive_rate_line() -> None:
    line = "popfleet_audit.jobs INFO " + jobs.REVIVE_READ_LOG % (1200, 24, 3, 2.54, 472.4)
    found = auditing.REVIVE_RATE.search(line)
    assert found is not None
    assert (
        found.group(1) == "1200 records of 24 revive queues on 3 broker(s) in 2.5 s (472 records/s)"
    )
