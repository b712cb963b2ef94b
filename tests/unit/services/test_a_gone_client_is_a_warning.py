"""grpc.aio's "answer not written, the client closed the call" is one WARNING line.

grpc logs it at ERROR with a traceback (``ExecuteBatchError raised in core by servicer
method [...]``) when a kubelet probe times out on a busy node; the broker's logging turns
that line, and only that line, into a WARNING without a traceback.
"""

from __future__ import annotations

import logging

import pytest

from popbroker.roles import running


def _grpc_core_logs_exception(message: str, *args: object) -> None:
    try:
        raise RuntimeError("Failed execute_batch: (SendMessageOperation)")
    except RuntimeError:
        logging.getLogger(running.GRPC_CORE_LOGGER).exception(message, *args)


def test_the_client_gone_line_is_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    running.configure_logging("INFO")
    running.configure_logging("INFO")  # once is enough: no second filter
    assert len(logging.getLogger(running.GRPC_CORE_LOGGER).filters) == 1
    with caplog.at_level(logging.INFO):
        _grpc_core_logs_exception(running.CLIENT_GONE + " [%s]", "/grpc.health.v1.Health/Check")
        _grpc_core_logs_exception("Unexpected [%s] raised by servicer method [%s]", "E", "/x")
    gone, other = caplog.records
    assert (gone.levelname, gone.exc_info) == ("WARNING", None)
    assert gone.getMessage() == (
        f"{running.CLIENT_GONE} [/grpc.health.v1.Health/Check]: "
        "the client closed the call before its answer"
    )
    assert "Traceback" not in caplog.text.split("Unexpected")[0]
    assert other.levelname == "ERROR"
    assert other.exc_info is not None
