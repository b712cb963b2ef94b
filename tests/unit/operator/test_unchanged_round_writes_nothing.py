"""A round that changes nothing leaves kopf's status patch empty: no PATCH per resync tick."""

from __future__ import annotations

import copy
from typing import Any, cast

import kopf

from popfleet_operator.handlers import fanning, metrics, runtime, topics
from popfleet_operator.model.observations import TopicOutcome
from popfleet_operator.status import conditions as c

EXPECTED = ("demo-0", "demo-1", "demo-2")


def body_with(status: dict[str, Any], *, generation: int = 2) -> kopf.Body:
    raw = {
        "apiVersion": "popfleet.io/v1alpha1",
        "kind": "Topic",
        "metadata": {"name": "orders", "namespace": "ns", "uid": "u1", "generation": generation},
        "spec": {"clusterRef": {"name": "demo"}},
        "status": status,
    }
    return kopf.Body(cast(kopf.RawBody, raw))


def applied(status: dict[str, Any], patch: kopf.Patch) -> dict[str, Any]:
    """``status`` after the apiserver took ``patch`` (a merge patch of whole fields)."""
    after = copy.deepcopy(status)
    for key, value in (patch.get("status") or {}).items():
        if value is None:
            after.pop(key, None)
        else:
            after[key] = value
    return after


def round_of(status: dict[str, Any], outcomes: list[TopicOutcome]) -> kopf.Patch:
    patch = kopf.Patch()
    fanning.report(
        topics.TOPICS,
        body=body_with(status),
        patch=patch,
        broker_name="orders",
        outcomes=outcomes,
        expected=EXPECTED,
    )
    return patch


def confirmed(queues: int = 8) -> list[TopicOutcome]:
    return [TopicOutcome(b, synced=True, config_epoch="e1", queues=queues) for b in EXPECTED]


def already_synced() -> dict[str, Any]:
    """A status that says TopicSynced (so the first round posts no transition Event)."""
    update = c.Condition(c.TOPIC_SYNCED, True, c.ALL_BROKERS_CONFIRMED, "3/3 brokers confirmed")
    conditions = c.merge([], [update], now="2026-11-25T10:00:00Z", generation=1)
    return {"conditions": conditions}


def test_an_unchanged_round_leaves_the_patch_empty() -> None:
    first = round_of(already_synced(), confirmed())
    assert {"brokers", "syncedBrokers", "topicName", "observedGeneration", "conditions"} <= set(
        first["status"]
    )
    status = applied(already_synced(), first)
    assert round_of(status, confirmed()) == {}


def test_only_what_changed_is_patched() -> None:
    status = applied(already_synced(), round_of(already_synced(), confirmed()))
    grown = round_of(status, confirmed(queues=16))
    assert set(grown["status"]) == {"brokers"}  # conditions, counts, name: all as before
    assert [b["queues"] for b in grown["status"]["brokers"]] == [16, 16, 16]


def test_a_flipped_condition_is_patched_with_a_new_transition_time() -> None:
    status = applied(already_synced(), round_of(already_synced(), confirmed()))
    before = {x["type"]: x for x in status["conditions"]}
    late = [*confirmed()[:2], TopicOutcome("demo-2", synced=False, config_epoch="e1")]
    patch = round_of(status, late)
    assert {"conditions", "brokers", "syncedBrokers"} <= set(patch["status"])
    after = {x["type"]: x for x in patch["status"]["conditions"]}
    assert after[c.TOPIC_SYNCED]["status"] == "False"
    assert after[c.TOPIC_SYNCED]["lastTransitionTime"] != "2026-11-25T10:00:00Z"
    assert before[c.TOPIC_SYNCED]["lastTransitionTime"] == "2026-11-25T10:00:00Z"


def test_a_new_generation_is_patched_even_when_nothing_else_changed() -> None:
    status = applied(already_synced(), round_of(already_synced(), confirmed()))
    patch = kopf.Patch()
    updates = [c.Condition(c.TOPIC_SYNCED, True, c.ALL_BROKERS_CONFIRMED, "3/3 brokers confirmed")]
    runtime.write_status(patch, body_with(status, generation=3), updates)
    assert patch["status"]["observedGeneration"] == 3
    synced = c.find(patch["status"]["conditions"], c.TOPIC_SYNCED)
    assert synced is not None and synced["observedGeneration"] == 3


def test_a_field_given_as_none_is_removed_only_when_present() -> None:
    updates = [c.Condition(c.READY, True, c.RECONCILED)]
    status = applied({}, _written({}, updates))
    assert _written(status, updates, rollout=None) == {}
    removed = _written({**status, "rollout": {"partition": 0}}, updates, rollout=None)
    assert removed == {"status": {"rollout": None}}


def _written(status: dict[str, Any], updates: list[c.Condition], **fields: Any) -> kopf.Patch:
    patch = kopf.Patch()
    runtime.write_status(patch, body_with(status), updates, **fields)
    return patch


def test_every_written_condition_is_a_series_until_the_object_goes() -> None:
    """``popfleet_operator_condition{kind,namespace,name,type}``: what the Degraded and
    ModeApplied alerts read; 1 while True, 0 otherwise, gone with the object."""

    def series() -> dict[str, float]:
        return {
            s.labels["type"]: s.value
            for family in metrics.CONDITION.collect()
            for s in family.samples
            if (s.labels["kind"], s.labels["namespace"], s.labels["name"])
            == ("Topic", "ns", "orders")
        }

    metrics.forget("Topic", "ns", "orders")
    round_of(already_synced(), confirmed())
    assert series()[c.TOPIC_SYNCED] == 1.0
    assert series()[c.DEGRADED] == 0.0
    degraded = c.Condition(c.DEGRADED, True, c.BROKER_UNREACHABLE, "demo-2 did not answer")
    runtime.write_status(kopf.Patch(), body_with(already_synced()), [degraded])
    assert series()[c.DEGRADED] == 1.0
    assert series()[c.TOPIC_SYNCED] == 1.0
    metrics.forget("Topic", "ns", "orders")
    assert series() == {}
