"""bench.send_path_cpu measures the real send path: every request is answered OK."""

from __future__ import annotations

import asyncio

import pytest

from bench import send_path_cpu


def test_a_short_measurement_sends_every_request_and_gives_a_positive_figure() -> None:
    cpu_us = asyncio.run(send_path_cpu._measure(5, batch=4, body_bytes=16))
    assert 0 < cpu_us < 1_000_000


def test_a_refused_send_fails_the_measurement_instead_of_timing_errors() -> None:
    with pytest.raises(RuntimeError, match="SendMessage failed"):
        asyncio.run(send_path_cpu._measure(5, batch=4, body_bytes=0))  # empty bodies
