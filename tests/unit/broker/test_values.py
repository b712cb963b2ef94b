"""``popbroker.values.per_message``: a frozen value for the type checker, a plain slotted
dataclass with the frozen one's equality and hash at run time."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

from mypy import api as mypy_api

from popbroker.values import per_message


@per_message
class Placement:
    queue_id: int
    queue_offset: int
    tag: str = ""


def test_equal_values_are_equal_and_hash_alike_and_replace_makes_a_new_one() -> None:
    a, b = Placement(1, 7), Placement(queue_id=1, queue_offset=7)
    assert a == b
    assert hash(a) == hash(b)
    assert {a: "x"}[b] == "x"
    assert Placement(1, 8) != a
    moved = dataclasses.replace(a, queue_offset=9)
    assert (moved.queue_offset, a.queue_offset) == (9, 7)
    assert not hasattr(a, "__dict__")  # slotted


def test_the_type_checker_refuses_an_assignment_to_a_field(tmp_path: Path) -> None:
    source = tmp_path / "uses_a_value.py"
    source.write_text(
        textwrap.dedent(
            """
            from popbroker.values import per_message

            @per_message
            class Placement:
                queue_id: int

            placement = Placement(queue_id=1)
            placement.queue_id = 2
            """
        )
    )
    stdout, _, status = mypy_api.run(
        [
            "--strict",
            "--no-incremental",
            "--cache-dir",
            str(tmp_path / "cache"),
            str(source),
        ]
    )
    assert status == 1, stdout
    assert 'Property "queue_id" defined in "Placement" is read-only' in stdout, stdout
    assert stdout.count("error:") == 1, stdout
