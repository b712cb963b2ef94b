"""popfront builds the client's Message from a ``D`` item; Python is the reference.

The cases and the reference's answers are ``broker_image/front/testdata/deliveries.json``
(:mod:`tests.unit.services.front_deliveries`); ``go test`` compares popfront's messages
with them. Here: that file is what the reference answers today, so a change on the
Python side that is not carried to popfront fails one test or the other.
"""

from __future__ import annotations

import json

from popbroker.grpc.front import FrontDelivery
from popbroker.services import messages
from tests.unit.services import front_deliveries


def test_the_go_side_s_cases_are_the_reference_s_answers_today() -> None:
    committed = front_deliveries.FIXTURE.read_text()
    assert committed == front_deliveries.render(), (
        "regenerate: .venv/bin/python -m tests.unit.services.front_deliveries > "
        f"{front_deliveries.FIXTURE.relative_to(front_deliveries.FIXTURE.parents[3])}"
    )
    cases = json.loads(committed)["cases"]
    assert len(cases) == front_deliveries.CASES
    assert all("response" in case for case in cases)


def test_a_front_delivery_is_counted_as_a_delivered_message() -> None:
    delivery = FrontDelivery(delivered=None, namespace="", store_host="")  # type: ignore[arg-type]
    assert delivery.HasField("message")
    assert not delivery.HasField("status")


def test_a_delivery_time_in_other_scripts_digits_is_not_one() -> None:
    """popfront reads TIMER_DELIVER_MS only as ASCII digits; so does the reference."""
    assert messages.delivery_timestamp_ms({messages.PROPERTY_DELIVER_MS: "\u0661\u0662"}) is None
    assert messages.delivery_timestamp_ms({messages.PROPERTY_DELIVER_MS: "12"}) == 12
