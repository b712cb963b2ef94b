"""The plot of :mod:`bench.pull_vs_pop`: throughput and per-queue backlog over time, both modes.

Top: messages processed per second (1 s bins) for PULL and POP, with the
offered rate and the moment the consumer hangs. Bottom: each queue's backlog
(max offset - processed) for both modes. Rendered with matplotlib's Agg
backend (no display), written as a PNG. matplotlib is a bench-only package
(``requirements/bench.txt``), imported when the plot is drawn.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

COLOURS = {"PULL": "tab:red", "POP": "tab:blue"}


def _pyplot() -> Any:
    try:
        matplotlib = importlib.import_module("matplotlib")
    except ImportError as exc:
        raise SystemExit(
            "bench/pull_vs_pop.py needs matplotlib: .venv/bin/pip install -r requirements/bench.txt"
        ) from exc
    matplotlib.use("Agg")
    return importlib.import_module("matplotlib.pyplot")


def plot(runs: dict[str, dict[str, Any]], *, config: dict[str, float], path: Path) -> None:
    """Draw both modes' series into ``path``."""
    plt = _pyplot()
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    hang_s = config["hang_at_s"]
    for mode, run in runs.items():
        bins = run["throughput_bins"]
        top.step(
            [t + 1 for t in range(len(bins))],
            bins,
            where="pre",
            color=COLOURS[mode],
            label=f"{mode}: {run['after_hang']['mean_msgs_per_s']:.0f} msgs/s after the hang",
        )
        times = [s["t"] for s in run["samples"]]
        notes = {
            ("PULL", "q0"): " (the hung consumer's queue)",
            ("POP", "q0"): " (plateaus: what the hung consumer holds)",
        }
        for queue, style in (("q0", "-"), ("q1", "--")):
            note = notes.get((mode, queue), "")
            bottom.plot(
                times,
                [s[f"backlog_{queue}"] for s in run["samples"]],
                linestyle=style,
                color=COLOURS[mode],
                label=f"{mode} {queue}{note}",
            )
    top.axhline(config["rate_per_s"], color="grey", linewidth=0.8, linestyle=":",
                label="offered rate")  # fmt: skip
    for axis in (top, bottom):
        axis.axvline(hang_s, color="black", linewidth=0.8, linestyle="--")
        axis.grid(alpha=0.3)
    top.text(hang_s, top.get_ylim()[1] * 0.95, " one consumer hangs", va="top", fontsize=9)
    top.set_ylabel("processed (msgs/s)")
    top.set_title(
        f"{int(config['consumers'])} PushConsumers, {int(config['queues'])} queues, "
        f"{config['processing_ms']:g} ms per message; one hangs at t={hang_s:g} s"
    )
    top.legend(loc="lower left", fontsize=8)
    bottom.set_ylabel("backlog (messages)")
    bottom.set_xlabel("time since the first send (s)")
    bottom.legend(loc="upper left", fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
