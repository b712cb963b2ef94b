"""Conditions: lastTransitionTime moves only when the status flips."""

from __future__ import annotations

from popfleet_operator.status import conditions as c


def test_time_kept_while_status_unchanged() -> None:
    first = c.merge([], [c.Condition(c.READY, False, "A", "x")], now="t1", generation=1)
    second = c.merge(first, [c.Condition(c.READY, False, "B", "y")], now="t2", generation=2)
    assert second == [
        {
            "type": "Ready",
            "status": "False",
            "reason": "B",
            "message": "y",
            "observedGeneration": 2,
            "lastTransitionTime": "t1",
        }
    ]
    third = c.merge(second, [c.Condition(c.READY, True, "C")], now="t3", generation=2)
    assert third[0]["lastTransitionTime"] == "t3"
    assert third[0]["status"] == "True"


def test_unmentioned_conditions_stay_and_order_is_stable() -> None:
    before = c.merge(
        [],
        [c.Condition(c.READY, True, "R"), c.Condition(c.DEGRADED, False, "D")],
        now="t1",
        generation=1,
    )
    after = c.merge(before, [c.Condition(c.RECONCILING, None, "X")], now="t2", generation=1)
    assert [x["type"] for x in after] == ["Degraded", "Ready", "Reconciling"]
    assert c.find(after, "Reconciling") is not None
    assert c.find(after, "Reconciling")["status"] == "Unknown"  # type: ignore[index]
    assert c.is_true(after, "Ready")
    assert not c.is_true(after, "Degraded")
