"""The pure rules of bench/operator_scale.py: what counts as converged, CPU from samples."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import common, scaletargets
from bench import operator_scale as scale


def _obj(generation: int, *conditions: dict[str, Any], brokers: int = 3) -> dict[str, Any]:
    entries = [{"mode": "POP", "popShareQueueNum": 1}] * brokers
    return {
        "metadata": {"generation": generation},
        "status": {"conditions": list(conditions), "brokers": entries},
    }


def test_converged_needs_the_domain_condition_for_the_current_generation() -> None:
    synced = {"type": "TopicSynced", "status": "True", "observedGeneration": 2}
    assert scale.converged(_obj(2, synced), "TopicSynced")
    assert not scale.converged(_obj(3, synced), "TopicSynced")  # an older generation's answer
    assert not scale.converged(_obj(2, {**synced, "status": "False"}), "TopicSynced")
    assert not scale.converged(_obj(2, synced), "ModeApplied")


def test_a_mode_counts_only_when_every_broker_reads_it_back() -> None:
    applied = {"type": "ModeApplied", "status": "True", "observedGeneration": 1}
    assert scale.mode_converged(_obj(1, applied), "POP", 1)
    assert not scale.mode_converged(_obj(1, applied), "POP", 2)
    assert not scale.mode_converged(_obj(1, applied, brokers=2), "POP", 1)
    assert not scale.mode_converged(None, "POP", 1)


def test_cpu_percent_is_cpu_time_over_wall_time_and_none_across_a_restart() -> None:
    samples = [scaletargets.Sample(10.0, 0, 5.0), scaletargets.Sample(20.0, 0, 6.0)]
    assert scale.cpu_percent(samples) == 10.0
    restarted = [scaletargets.Sample(10.0, 0, 5.0), scaletargets.Sample(20.0, 0, 0.5)]
    assert scale.cpu_percent(restarted) is None
    assert scale.cpu_percent(samples[:1]) is None


def test_counters_are_summed_over_their_samples_and_filtered_by_label() -> None:
    text = (
        "# TYPE apiserver_request_total counter\n"
        'apiserver_request_total{code="200",verb="GET"} 40\n'
        'apiserver_request_total{code="429",verb="PATCH"} 3\n'
        "# TYPE apiserver_request_duration_seconds histogram\n"
        'apiserver_request_duration_seconds_count{verb="GET"} 999\n'
    )
    assert scale.counter_total(text, "apiserver_request") == 43
    assert scale.counter_total(text, "apiserver_request", code="429") == 3
    assert scale.counter_total(text, "popfleet_admin_requests") is None


def test_kind_samples_come_from_the_operators_own_process_metrics() -> None:
    text = (
        "# TYPE process_resident_memory_bytes gauge\n"
        "process_resident_memory_bytes 1.5e+08\n"
        "# TYPE process_cpu_seconds_total counter\n"
        "process_cpu_seconds_total 12.5\n"
    )
    assert scaletargets.metric_value(text, "process_resident_memory_bytes") == 150_000_000
    assert scaletargets.metric_value(text, "process_cpu_seconds_total") == 12.5
    assert scaletargets.metric_value(text, "process_open_fds") is None


def test_a_kind_run_of_one_size_keeps_the_other_sizes_already_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    scale.record("scale_kind", [{"n_topics": 500, "x": 1}], what="w")
    scale.record("scale_kind", [{"n_topics": 100, "x": 2}], what="w")
    path = scale.record("scale_kind", [{"n_topics": 500, "x": 3}], what="w")
    runs = json.loads(path.read_text())["runs"]
    assert [(r["n_topics"], r["x"]) for r in runs] == [(100, 2), (500, 3)]
    assert "load_average" in json.loads(path.read_text())["machine"]
