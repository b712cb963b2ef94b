"""planning.silence: a resync holds a confirmed object's status while a broker is briefly
silent, and reports the broker once it has been silent for the grace period."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import kopf

from popfleet_operator.handlers import fanning, runtime, topics
from popfleet_operator.model.observations import BrokerOutcome
from popfleet_operator.planning import resync
from popfleet_operator.planning.silence import BrokerSilence
from tests.unit.operator.test_unchanged_round_writes_nothing import body_with


def _round(*silent: str) -> list[BrokerOutcome]:
    return [
        BrokerOutcome(b, synced=b not in silent, reachable=b not in silent)
        for b in ("demo-0", "demo-1", "demo-2")
    ]


def test_a_silent_broker_is_held_until_the_grace_ends_and_an_answer_clears_it() -> None:
    silence = BrokerSilence(grace_s=30.0)
    assert not silence.hold("ns", "demo", _round(), now_s=0.0)  # nothing silent: report
    silence.observe("ns", "demo", _round("demo-1"), now_s=100.0)
    assert silence.hold("ns", "demo", _round("demo-1"), now_s=100.0)
    silence.observe("ns", "demo", _round("demo-1"), now_s=129.0)  # still since 100
    assert silence.hold("ns", "demo", _round("demo-1"), now_s=129.9)
    assert not silence.hold("ns", "demo", _round("demo-1"), now_s=130.0)  # grace over
    silence.observe("ns", "demo", _round(), now_s=131.0)  # it answered: silence cleared
    silence.observe("ns", "demo", _round("demo-1"), now_s=200.0)
    assert silence.hold("ns", "demo", _round("demo-1"), now_s=200.0)


def test_silence_is_per_cluster_and_every_silent_broker_must_be_young() -> None:
    silence = BrokerSilence(grace_s=30.0)
    silence.observe("ns", "demo", _round("demo-0"), now_s=0.0)
    silence.observe("ns", "demo", _round("demo-0", "demo-2"), now_s=25.0)
    assert silence.hold("ns", "demo", _round("demo-0", "demo-2"), now_s=29.0)
    assert not silence.hold("ns", "demo", _round("demo-0", "demo-2"), now_s=31.0)  # demo-0
    assert silence.silent_for("ns", "other", "demo-0", now_s=31.0) == 0.0


def test_only_a_status_confirmed_for_the_current_generation_may_be_held() -> None:
    condition = {"type": "TopicSynced", "status": "True", "observedGeneration": 3}
    status = {"observedGeneration": 3, "conditions": [condition]}
    assert resync.confirmed(status, domain="TopicSynced", generation=3)
    assert not resync.confirmed(status, domain="TopicSynced", generation=4)
    assert not resync.confirmed(status, domain="ModeApplied", generation=3)
    false = {**status, "conditions": [{**condition, "status": "False"}]}
    assert not resync.confirmed(false, domain="TopicSynced", generation=3)


def _topic(*, generation: int, confirmed_generation: int) -> kopf.Body:
    condition = {
        "type": "TopicSynced",
        "status": "True",
        "observedGeneration": confirmed_generation,
    }
    status = {"observedGeneration": confirmed_generation, "conditions": [condition]}
    return body_with(status, generation=generation)


def test_a_metadata_edit_of_a_confirmed_object_holds_but_a_new_generation_reports() -> None:
    """An annotation edit runs a change round for a generation already confirmed: a broker
    silent for a moment then must not flip the object (it once did, under load, when the
    round ran while the broker was frozen); a spec edit (a new generation) reports at once."""
    rt = cast(runtime.Runtime, SimpleNamespace(silence=BrokerSilence(grace_s=30.0)))

    def held(body: kopf.Body, now_s: float) -> bool:
        return fanning.held(
            topics.TOPICS, rt=rt, body=body, cluster="demo", outcomes=_round("demo-1"), now_s=now_s
        )

    assert held(_topic(generation=3, confirmed_generation=3), now_s=100.0)
    assert not held(_topic(generation=4, confirmed_generation=3), now_s=101.0)
    assert not held(_topic(generation=3, confirmed_generation=3), now_s=130.0)  # grace over
