"""The popfleet-audit command line (the operator's contract), positions, metrics, revive rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from popfleet_api import models
from popfleet_audit import config, datasource, fleetscan, metrics
from popfleet_audit.findings import AuditSummary, GroupFindings
from popfleet_audit.main import main


def test_the_operators_command_line_parses(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    parsed = config.parse_args(
        [
            "all", "--brokers", "10.0.0.7:9877,broker-1.svc:9877",
            "--output", "/data/output", "--history", "/data/history",
            "--namespace", "ns", "--cluster", "fleet", "--admin-token-file", str(token),
            "--master", "local[2]",
        ],
        now_ms=42,
    )  # fmt: skip
    assert parsed.brokers == ("10.0.0.7:9877", "broker-1.svc:9877")
    assert (parsed.runs_lag, parsed.runs_revive, parsed.patches_status) == (True, True, True)
    assert parsed.history_dir == Path("/data/history")
    assert parsed.run_id == "audit-42"
    assert config.read_token(parsed) == "s3cret"
    lag_only = config.parse_args(["lag", "--brokers", "h:1", "--output", "o", "--no-patch-status"])
    assert (lag_only.runs_revive, lag_only.patches_status) == (False, False)
    assert lag_only.history_dir == Path("o/history")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--brokers", "nohost"], "not HOST:PORT"),
        (["--brokers", "h:1,h:1"], "twice"),
        (["--brokers", "h:99999"], "not HOST:PORT"),
        (["--brokers", "h:1", "--namespace", "ns"], "go together"),
        (["--brokers", "h:1", "--window", "1"], "at least 2"),
        (["--brokers", "h:1", "--admin-token-file", "/nonexistent"], "not a file"),
        (["--brokers", "h:1", "--run-id", "a b"], "--run-id"),
    ],
)
def test_bad_command_lines_exit_2_and_touch_nothing(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "out"
    assert main(["all", "--output", str(output), *args]) == 2
    assert message in capsys.readouterr().err
    assert not output.exists()


@pytest.mark.parametrize(
    "text",
    ['{"b0/x": 1}', '{"b0/1": -1}', '{"b0/1": "7"}', "[1]", "not json", '{"/1": 3}'],
)
def test_bad_positions_are_refused(text: str) -> None:
    with pytest.raises(datasource.DataSourceOptionError):
        datasource.parse_positions(text, "startPositions")


def test_positions_parse() -> None:
    assert datasource.parse_positions('{"broker-0/3": 12}', "startPositions") == {"broker-0/3": 12}
    assert datasource.parse_positions(None, "startPositions") == {}


def test_an_ack_without_broker_name_is_the_local_brokers() -> None:
    bounds = fleetscan.ReviveQueueBounds("h:1", "broker-7", 2, 0, 10, 0, 99)
    record = models.ReviveRecord(
        revive_queue_id=2, queue_offset=4, next_queue_offset=5, store_timestamp_ms=3,
        kind=models.ReviveRecordKind.ACK, tag="ack",
        ack=models.AckRecord("t", "g", 1, 10, 555, None, (11, 12)),
    )  # fmt: skip
    row = fleetscan.revive_row(bounds, record)
    assert row == (
        "h:1", "broker-7", 2, 4, 5, 3, "ACK", "ack", "t", "g", 1, 10, 555, None, None, None,
        [11, 12], "broker-7", None, 99,
    )  # fmt: skip


def test_metrics_text() -> None:
    summary = AuditSummary(
        run_id="r", audited_at_ms=2_000, brokers=("h:1",), jobs=("lag",),
        groups={"g\"x": GroupFindings("g\"x", status="WARN", lag_messages=5, time_lag_ms=1_500)},
        partitions=({"broker_name": "b", "group": "g\"x", "topic": "t", "queue_id": 0,
                     "status": "WARN", "lag_messages": 5},),
    )  # fmt: skip
    text = metrics.render(summary)
    assert 'popfleet_audit_group_lag_messages{group="g\\"x"} 5\n' in text
    assert 'popfleet_audit_group_time_lag_seconds{group="g\\"x"} 1.5\n' in text
    assert 'popfleet_audit_group_status{group="g\\"x",status="WARN"} 1\n' in text
    assert 'popfleet_audit_group_status{group="g\\"x",status="OK"} 0\n' in text
    assert "popfleet_audit_group_revive_backlog_messages" not in text  # revive did not run
    assert "# TYPE popfleet_audit_partition_status gauge" in text
