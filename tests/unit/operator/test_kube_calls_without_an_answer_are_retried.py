"""A Kubernetes call that gets no answer is a retriable ``KubeError``, never a traceback.

``Kube.request`` over a fake ``ApiClient`` that raises what aiohttp and asyncio raise when
the apiserver is slow or gone; ``reconcile_round`` then retries with back-off (change
handlers) or logs one line (timer ticks).
"""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
import kopf
import pytest

from popfleet_operator import errors
from popfleet_operator.clients import kube as kube_client
from popfleet_operator.handlers import runtime
from popfleet_operator.status import conditions as c

LOG = logging.getLogger("test")
URL = "/apis/popfleet.io/v1alpha1/namespaces/ns/brokerclusters/demo"


class RaisingApi:
    """``call_api`` raises ``exc``: the call got no answer."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    async def call_api(self, *_: Any, **__: Any) -> Any:
        raise self.exc


class CutResponse:
    """A response whose body never arrives completely."""

    status = 200
    released = False

    async def text(self) -> str:
        raise aiohttp.ClientPayloadError("Response payload is not completed")

    def release(self) -> None:
        self.released = True


class CutApi:
    def __init__(self) -> None:
        self.response = CutResponse()

    async def call_api(self, *_: Any, **__: Any) -> CutResponse:
        return self.response


NO_ANSWERS = [
    TimeoutError(),
    aiohttp.ServerTimeoutError("Timeout on reading data from socket"),
    aiohttp.ServerDisconnectedError(),
    ConnectionRefusedError(111, "Connection refused"),
]


@pytest.mark.parametrize("exc", NO_ANSWERS, ids=lambda e: type(e).__name__)
async def test_no_answer_is_a_retriable_kube_error(exc: BaseException) -> None:
    kube = kube_client.Kube(RaisingApi(exc))
    with pytest.raises(errors.KubeError) as raised:
        await kube.request("GET", URL)
    assert raised.value.status == 0
    assert raised.value.retriable
    assert raised.value.message.startswith(f"GET {URL}: no answer ({type(exc).__name__}")
    assert raised.value.__cause__ is exc


async def test_a_body_cut_short_is_a_retriable_kube_error_and_the_response_is_released() -> None:
    api = CutApi()
    with pytest.raises(errors.KubeError) as raised:
        await kube_client.Kube(api).request("GET", URL)
    assert raised.value.retriable
    assert "ClientPayloadError" in raised.value.message
    assert api.response.released


async def test_get_or_none_does_not_take_no_answer_for_not_found() -> None:
    with pytest.raises(errors.KubeError):
        await kube_client.Kube(RaisingApi(TimeoutError())).get_or_none(URL)


def reading(kube: kube_client.Kube) -> Any:
    async def reconcile() -> list[c.Condition]:
        await kube.request("GET", URL)
        return []

    return reconcile


async def test_a_change_handler_retries_a_timeout_with_back_off() -> None:
    kube = kube_client.Kube(RaisingApi(TimeoutError()))
    with pytest.raises(kopf.TemporaryError) as raised:
        await runtime.reconcile_round(
            "Topic", memo={}, patch=kopf.Patch(), logger=LOG, retry=1, reconcile=reading(kube)
        )
    assert raised.value.delay is not None and raised.value.delay > 0


async def test_a_timer_tick_logs_one_line_for_a_timeout(caplog: pytest.LogCaptureFixture) -> None:
    kube = kube_client.Kube(RaisingApi(aiohttp.ServerTimeoutError("read timeout")))
    with caplog.at_level(logging.WARNING):
        await runtime.reconcile_round(
            "Topic", memo={}, patch=kopf.Patch(), logger=LOG, retry=None, reconcile=reading(kube)
        )
    assert [r.getMessage() for r in caplog.records] == [
        f"resync: GET {URL}: no answer (ServerTimeoutError: read timeout)"
    ]
    assert caplog.records[0].exc_info is None
