"""``per_message``: frozen value classes made once or more per message, without the
runtime cost of ``dataclass(frozen=True)``.

A frozen dataclass enforces immutability at run time: its ``__init__`` sets every field
through ``object.__setattr__``, about four times the cost of a slotted class's plain
``__init__`` (0.81 against 0.18 us for seven fields on the benchmark host). The send path
makes nine such objects per message (57 fields: the message, the append, its record,
placement, result and dispatch, the receipt), and their ``__init__`` was ~12% of popack's
CPU under the load generator's produce phase (``bench.profile_shapes``).

A class decorated with :func:`per_message` is, to the type checker, a frozen slotted
dataclass (PEP 681 ``dataclass_transform``, ``frozen_default``): mypy refuses an
assignment to a field, as for ``dataclass(frozen=True)``
(``tests/unit/broker/test_values.py`` checks that it does). At run time it is a slotted
dataclass with the plain ``__init__`` and the same equality and field hash as the frozen
one. Immutability is therefore a checked rule of the code, not a run-time guard: use this
only for values on a per-message path, and plain ``dataclass(frozen=True, slots=True)``
everywhere else (STYLE.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar, dataclass_transform

_T = TypeVar("_T")


@dataclass_transform(frozen_default=True, eq_default=True)
def per_message(cls: type[_T]) -> type[_T]:
    """``cls`` as a slotted dataclass, frozen for the type checker (see the module)."""
    return dataclass(slots=True, unsafe_hash=True)(cls)
