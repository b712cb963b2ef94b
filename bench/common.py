"""Shared helpers for benchmarks: bounded repetition, medians, JSON output.

Benchmarks are not tests: nothing here asserts a timing. Each benchmark runs its
cases ``repeats`` times (default 3) in one process, reports per-run figures and
the median, and writes ``bench/results/<name>.json`` with the machine facts.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_average": [round(x, 2) for x in os.getloadavg()],  # at write time
    }


def median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def write(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {"benchmark": name, "machine": machine(), **payload}
    path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    return path
