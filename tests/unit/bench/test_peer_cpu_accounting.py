"""Server CPU per message from /proc: parsing, the process tree, the per-phase window.

A synthetic proc root (``<pid>/stat``, ``<pid>/task/<tid>/children``, ``loadavg``)
stands in for ``/proc``; :mod:`bench.peers.cpu` takes its root as a parameter.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.peers import cpu


def _stat(pid: int, comm: str, *, utime: int, stime: int, cutime: int = 0, cstime: int = 0) -> str:
    # fields 3..17 of proc(5): state ppid pgrp session tty tpgid flags minflt cminflt majflt
    # cmajflt utime stime cutime cstime, then the rest (ignored)
    return (
        f"{pid} ({comm}) S 1 {pid} {pid} 0 -1 4194560 100 0 0 0 "
        f"{utime} {stime} {cutime} {cstime} 20 0 4 0 12345 1000000 500 18446744073709551615\n"
    )


def _proc(
    root: Path,
    stats: dict[int, tuple[str, int, int, int, int]],
    children: dict[int, list[int]],
    load: str,
) -> Path:
    for pid, (comm, utime, stime, cutime, cstime) in stats.items():
        task = root / str(pid) / "task" / str(pid)
        task.mkdir(parents=True)
        (root / str(pid) / "stat").write_text(
            _stat(pid, comm, utime=utime, stime=stime, cutime=cutime, cstime=cstime)
        )
        (task / "children").write_text(" ".join(str(c) for c in children.get(pid, [])))
    (root / "loadavg").write_text(f"{load} 1.00 0.50 2/300 4242\n")
    (root / "stat").write_text(
        "cpu  1000 10 300 5000 20 0 5 40 0 0\ncpu0 500 5 150 2500 10 0 2 20 0 0\nintr 1\n"
    )
    return root


def test_stat_fields_are_read_after_the_last_parenthesis() -> None:
    stat = cpu.parse_stat(_stat(4242, "java (proxy) x", utime=700, stime=50, cutime=3, cstime=1))
    assert (stat.pid, stat.state) == (4242, "S")
    assert (stat.utime, stat.stime, stat.cutime, stat.cstime) == (700, 50, 3, 1)
    assert stat.ticks == 754


@pytest.mark.parametrize("text", ["", "4242 (java) S 1 2 3", "no parenthesis at all"])
def test_malformed_stat_lines_are_rejected(text: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the message names the line
        cpu.parse_stat(text)


def test_the_tree_sums_every_descendant_and_waited_children(tmp_path: Path) -> None:
    # 10 = popbroker store, 11 = a helper it forked, 12 = the helper's child; 20 = popack;
    # 99 = an unrelated process that must not count.
    proc = _proc(
        tmp_path,
        {
            10: ("popbroker", 100, 20, 5, 1),
            11: ("helper", 30, 3, 0, 0),
            12: ("grandchild", 2, 1, 0, 0),
            20: ("popbroker", 200, 40, 0, 0),
            99: ("other", 10_000, 10_000, 0, 0),
        },
        {10: [11], 11: [12]},
        "3.25",
    )
    assert cpu.tree([10, 20], proc=proc) == [10, 20, 11, 12]
    reading = cpu.read([10, 20], proc=proc)
    assert reading.ticks == (100 + 20 + 5 + 1) + (30 + 3) + (2 + 1) + (200 + 40)
    assert reading.processes == 4
    assert reading.load_1m == 3.25
    assert (reading.machine_ticks, reading.steal_ticks) == (
        1000 + 10 + 300 + 5000 + 20 + 5 + 40,
        40,
    )


def test_a_vanished_process_counts_as_nothing(tmp_path: Path) -> None:
    proc = _proc(tmp_path, {10: ("redis-server", 50, 50, 0, 0)}, {10: [11]}, "0.50")
    assert cpu.read([10], proc=proc).ticks == 100  # 11 is listed as a child but already gone


def test_a_window_gives_cpu_seconds_and_microseconds_per_message() -> None:
    before = cpu.Reading(ticks=1_000, processes=3, load_1m=1.5)
    after = cpu.Reading(ticks=1_250, processes=3, load_1m=2.0)
    assert after.cpu_s_since(before, clock_ticks=100) == 2.5
    window = cpu.window(before, after, 10_000)
    assert window["server_cpu_s"] == round(250 / cpu.CLOCK_TICKS, 3)
    assert window["cpu_us_per_msg"] == round(250 / cpu.CLOCK_TICKS * 1e6 / 10_000, 1)
    assert (window["load_1m_start"], window["load_1m_end"]) == (1.5, 2.0)
    assert cpu.us_per_message(2.5, 0) is None
    assert cpu.us_per_message(0.25, 1_000) == 250.0


def test_a_tree_that_lost_a_process_never_reports_negative_cpu() -> None:
    before = cpu.Reading(ticks=500, processes=2, load_1m=1.0)
    after = cpu.Reading(ticks=400, processes=1, load_1m=1.0)  # a child exited unwaited
    assert after.cpu_s_since(before) == 0.0


def test_the_live_proc_tree_of_this_process_is_readable() -> None:
    reading = cpu.read([os.getpid()])
    assert reading.processes >= 1
    assert reading.ticks > 0


def test_steal_is_the_hosts_share_of_the_machine_between_two_readings() -> None:
    before = cpu.Reading(ticks=0, processes=1, load_1m=1.0, machine_ticks=10_000, steal_ticks=100)
    after = cpu.Reading(ticks=0, processes=1, load_1m=1.0, machine_ticks=12_000, steal_ticks=400)
    assert cpu.steal_pct(before, after) == 15.0
    assert cpu.window(before, after, 1)["steal_pct"] == 15.0
    assert cpu.steal_pct(after, after) is None  # no time passed: no share


def test_a_stat_file_without_a_cpu_line_is_refused(tmp_path: Path) -> None:
    (tmp_path / "stat").write_text("intr 1\n")
    with pytest.raises(ValueError, match="no cpu line"):
        cpu.machine_and_steal(proc=tmp_path)
