"""bench.profile_shapes's summary of py-spy's raw stacks."""

from __future__ import annotations

from bench.profile_shapes import OTHER_AREA, area_of, top_functions

RAW = """\
main (cli.py:1);run (a.py:2);read (store.py:3) 6
main (cli.py:1);run (a.py:2);ack (acking.py:9) 3
main (cli.py:1);select (selectors.py:4) 1
not a stack line
"""


def test_own_and_inclusive_shares_of_all_samples() -> None:
    summary = top_functions(RAW.splitlines(keepends=True))
    assert summary["samples"] == 10
    assert summary["own_pct"] == [
        ("read (store.py:3)", 60.0),
        ("ack (acking.py:9)", 30.0),
        ("select (selectors.py:4)", 10.0),
    ]
    inclusive = dict(summary["inclusive_pct"])
    assert inclusive["main (cli.py:1)"] == 100.0
    assert inclusive["run (a.py:2)"] == 90.0
    assert inclusive["read (store.py:3)"] == 60.0


def test_a_frame_repeated_in_one_stack_counts_once() -> None:
    summary = top_functions(["f (x.py:1);g (x.py:2);f (x.py:1) 4\n"])
    assert dict(summary["inclusive_pct"])["f (x.py:1)"] == 100.0
    assert summary["own_pct"] == [("f (x.py:1)", 100.0)]


def test_no_samples_gives_empty_lists() -> None:
    assert top_functions([]) == {
        "samples": 0,
        "own_pct": [],
        "inclusive_pct": [],
        "own_by_area_pct": [],
    }


def test_own_samples_by_the_area_of_the_innermost_frame() -> None:
    raw = [
        "main (popbroker/cli.py:1);decode (popbroker/pop/receipts.py:9) 5\n",
        "main (popbroker/cli.py:1);select (selectors.py:4) 3\n",
        "main (popbroker/cli.py:1);ack_many (popbroker/services/acking.py:2) 1\n",
        "main (popbroker/cli.py:1);pwrite (os.py:1) 1\n",
    ]
    assert top_functions(raw)["own_by_area_pct"] == [
        ("codecs and POP bookkeeping", 50.0),
        ("event loop, sockets and framing", 30.0),
        ("our orchestration (services, servicer, store)", 10.0),
        (OTHER_AREA, 10.0),
    ]


def test_the_first_matching_area_wins() -> None:
    assert area_of("read (popbroker/store/format.py:3)") == "codecs and POP bookkeeping"
    assert area_of("read (popbroker/store/local.py:3)").startswith("our orchestration")
    assert area_of("__init__ (<string>:3)") == "dataclass and protobuf construction"
