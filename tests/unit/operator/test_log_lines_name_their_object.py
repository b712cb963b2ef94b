"""The operator's log configuration keeps kopf's ``[namespace/name]`` prefix on object lines."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, cast

import kopf
import pytest

from popfleet_operator import __main__ as entry


@pytest.fixture
def root_logging() -> Iterator[None]:
    """Put the root logger's handlers and level back after the test."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    asyncio_logger = logging.getLogger("asyncio")
    asyncio_state = asyncio_logger.handlers[:], asyncio_logger.propagate
    objects = logging.getLogger("kopf.objects")
    filters = objects.filters[:]
    yield
    root.handlers[:], root.level = handlers, level
    objects.filters[:] = filters
    asyncio_logger.handlers[:], asyncio_logger.propagate = asyncio_state


def topic(namespace: str, name: str) -> kopf.Body:
    raw: dict[str, Any] = {
        "apiVersion": "popfleet.io/v1alpha1",
        "kind": "Topic",
        "metadata": {"name": name, "namespace": namespace, "uid": "u1"},
    }
    return kopf.Body(cast(kopf.RawBody, raw))


@pytest.mark.usefixtures("root_logging")
def test_object_lines_carry_namespace_and_name(capsys: pytest.CaptureFixture[str]) -> None:
    entry.configure_logging("INFO")
    logger = kopf.ObjectLogger(body=topic("apps", "orders"), settings=kopf.OperatorSettings())
    logger.warning("resync: GET /x: no answer (TimeoutError)")
    logging.getLogger("popfleet_operator.test").info("metrics on 0.0.0.0:8080")
    lines = capsys.readouterr().err.splitlines()
    assert any(
        line.endswith(
            " WARNING kopf.objects: [apps/orders] resync: GET /x: no answer (TimeoutError)"
        )
        for line in lines
    )
    plain = [line for line in lines if "metrics on" in line]
    assert plain and " INFO popfleet_operator.test: metrics" in plain[0]
    assert "[apps/" not in plain[0]


@pytest.mark.usefixtures("root_logging")
def test_the_level_is_the_operators(capsys: pytest.CaptureFixture[str]) -> None:
    entry.configure_logging("WARNING")
    logger = kopf.ObjectLogger(body=topic("apps", "orders"), settings=kopf.OperatorSettings())
    logger.info("round done")
    logger.warning("broker slow")
    err = capsys.readouterr().err
    assert "round done" not in err
    assert "[apps/orders] broker slow" in err


@pytest.mark.usefixtures("root_logging")
def test_timer_successes_are_dropped_above_debug(capsys: pytest.CaptureFixture[str]) -> None:
    """kopf says "Timer 'resync' succeeded." per object per tick: dropped unless DEBUG."""
    body = topic("apps", "orders")
    entry.configure_logging("INFO")
    logger = kopf.ObjectLogger(body=body, settings=kopf.OperatorSettings())
    logger.info("Timer 'resync' succeeded.")
    logger.info("Handler 'changed' succeeded.")
    logger.warning("Timer 'resync' succeeded.")  # not kopf's INFO line: kept
    err = capsys.readouterr().err
    assert "INFO kopf.objects: [apps/orders] Handler 'changed' succeeded." in err
    assert "WARNING kopf.objects: [apps/orders] Timer 'resync' succeeded." in err
    assert "INFO kopf.objects: [apps/orders] Timer 'resync' succeeded." not in err
    entry.configure_logging("DEBUG")
    logger.info("Timer 'resync' succeeded.")
    assert "INFO kopf.objects: [apps/orders] Timer 'resync' succeeded." in capsys.readouterr().err
