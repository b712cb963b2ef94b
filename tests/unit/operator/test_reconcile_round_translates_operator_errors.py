"""``runtime.reconcile_round`` maps ``OperatorError.retriable`` to kopf's retry or give-up."""

from __future__ import annotations

import logging
from typing import Any

import kopf
import pytest
from prometheus_client import REGISTRY

from popfleet_operator import errors
from popfleet_operator.handlers import runtime
from popfleet_operator.status import conditions as c

LOG = logging.getLogger("test")


def failing(exc: Exception) -> Any:
    async def reconcile() -> list[c.Condition]:
        raise exc

    return reconcile


async def test_a_retriable_error_is_retried_with_back_off() -> None:
    unavailable = errors.KubeError("GET /api/v1/pods: 503", status=503)
    with pytest.raises(kopf.TemporaryError) as raised:
        await runtime.reconcile_round(
            "Topic",
            memo={},
            patch=kopf.Patch(),
            logger=LOG,
            retry=2,
            reconcile=failing(unavailable),
        )
    assert raised.value.delay is not None and raised.value.delay > 0
    assert raised.value.__cause__ is unavailable


async def test_a_permanent_error_gives_up_and_says_why() -> None:
    forbidden = errors.KubeError("PATCH /apis/apps/v1/...: 403 forbidden", status=403)
    with pytest.raises(kopf.PermanentError, match=r"^KubernetesError: PATCH .*403 forbidden$"):
        await runtime.reconcile_round(
            "BrokerCluster",
            memo={},
            patch=kopf.Patch(),
            logger=LOG,
            retry=0,
            reconcile=failing(forbidden),
        )


async def test_a_missing_secret_is_retried() -> None:
    missing = errors.SecretNotFound("spec.auth.adminTokenSecret: Secret 'admin' not found")
    with pytest.raises(kopf.TemporaryError):
        await runtime.reconcile_round(
            "Topic", memo={}, patch=kopf.Patch(), logger=LOG, retry=0, reconcile=failing(missing)
        )


@pytest.mark.parametrize("status", [403, 503])
async def test_a_timer_tick_never_raises(status: int, caplog: pytest.LogCaptureFixture) -> None:
    exc = errors.KubeError(f"GET /x: {status}", status=status)
    await runtime.reconcile_round(
        "Topic", memo={}, patch=kopf.Patch(), logger=LOG, retry=None, reconcile=failing(exc)
    )
    assert f"resync: GET /x: {status}" in caplog.text


def failed_count(kind: str) -> float | None:
    return REGISTRY.get_sample_value(
        "popfleet_operator_reconciles_total", {"kind": kind, "result": "failed"}
    )


@pytest.mark.parametrize("kind", ["BrokerCluster", "Topic", "ConsumerGroup"])
async def test_failed_rounds_are_a_series_from_the_start_and_count_up(kind: str) -> None:
    before = failed_count(kind)
    assert before is not None  # exported at 0 before any failure: rate() reads 0, not no data
    forbidden = errors.KubeError("PATCH /x: 403 forbidden", status=403)
    await runtime.reconcile_round(
        kind, memo={}, patch=kopf.Patch(), logger=LOG, retry=None, reconcile=failing(forbidden)
    )
    assert failed_count(kind) == before + 1
