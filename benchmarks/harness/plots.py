"""Plots: one PNG per model of the frontier run (the saved-bytes/recompute frontier, and
peak memory against budget), and the helpers every study's plots share."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from benchmarks.harness.analysis import of, pct
from benchmarks.harness.records import Record
from benchmarks.harness.systems import SYSTEMS

LINES = {
    "compile_budget": "tab:red",
    "recompute": "tab:blue",
    "recompute_peak": "tab:green",
    "recompute_mincut": "tab:cyan",
}
POINTS = {
    "eager": ("tab:gray", "o"),
    "checkpoint": ("black", "s"),
    "compile": ("tab:orange", "D"),
    "recompute_no_recompute": ("tab:green", "^"),
    "recompute_selective": ("tab:purple", "P"),
    "recompute_at_selective": ("tab:blue", "*"),
    "recompute_at_pytorch": ("tab:blue", "1"),
    "recompute_recompute_all": ("tab:brown", "v"),
    "recompute_sqrt_n": ("tab:olive", "X"),
}
MIB = float(1 << 20)


def finish(axis: plt.Axes, xlabel: str, ylabel: str, title: str) -> None:
    """Labels, title, a light grid and a small legend: every study's plots look alike."""
    axis.set_xlabel(xlabel)
    axis.set_ylabel(ylabel)
    axis.set_title(title)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)


def save(fig: plt.Figure, path: Path, *, dpi: int = 120) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def plot_model(records: Sequence[Record], model: str, step_flops: int | None, out: Path) -> Path:
    fig, (frontier, peak) = plt.subplots(1, 2, figsize=(13, 5))

    def y(record: Record) -> float:
        value = pct(record.recompute_flops, step_flops)
        return value if value is not None else (record.recompute_flops or 0) / 1e6

    wrong_x, wrong_y = [], []
    for system, color in LINES.items():
        points = [r for r in of(records, model, system) if r.ok and r.saved_bytes is not None]
        if not points:
            continue
        frontier.plot(
            [r.saved_bytes / MIB for r in points],  # type: ignore[operator]
            [y(r) for r in points],
            "-o",
            color=color,
            label=SYSTEMS[system].label,
            markersize=4,
        )
        for r in points:
            frontier.annotate(f"{r.budget:g}", (r.saved_bytes / MIB, y(r)), fontsize=6, color=color)  # type: ignore[operator]
        peak.plot(
            [r.budget for r in points],
            [(r.peak_bytes or 0) / MIB for r in points],
            "-o",
            color=color,
            label=SYSTEMS[system].label,
            markersize=4,
        )
        wrong_x += [r.saved_bytes / MIB for r in points if r.wrong]  # type: ignore[operator]
        wrong_y += [y(r) for r in points if r.wrong]
    for system, (color, marker) in POINTS.items():
        points = [r for r in of(records, model, system) if r.ok and r.saved_bytes is not None]
        label = SYSTEMS[system].label
        if points and SYSTEMS[system].budgeted:
            peak.plot(
                [r.budget for r in points], [(r.peak_bytes or 0) / MIB for r in points], marker, color=color
            )
        for r in points:
            frontier.scatter(r.saved_bytes / MIB, y(r), color=color, marker=marker, s=60, label=label)  # type: ignore[operator]
            if not SYSTEMS[system].budgeted:
                peak.axhline((r.peak_bytes or 0) / MIB, color=color, linestyle="--", linewidth=1, label=label)
            if r.wrong:
                wrong_x.append(r.saved_bytes / MIB)  # type: ignore[operator]
                wrong_y.append(y(r))
    if wrong_x:
        frontier.scatter(
            wrong_x, wrong_y, color="red", marker="x", s=120, linewidths=2, label="wrong gradients"
        )
    frontier.set_xlabel("activation bytes saved for backward, measured (MiB)")
    frontier.set_ylabel("recompute FLOPs (% of step FLOPs)" if step_flops else "recompute FLOPs (M)")
    frontier.set_title(f"{model}: memory / recompute frontier (labels: budget)")
    frontier.grid(alpha=0.3)
    _legend(frontier)
    peak.set_xlabel("memory budget")
    peak.set_ylabel("peak memory of forward+backward (MiB)")
    peak.set_title(f"{model}: peak memory (dashed: budget-independent systems)")
    peak.grid(alpha=0.3)
    _legend(peak)
    return save(fig, out / f"{model}.png", dpi=110)


def _legend(axes: plt.Axes) -> None:
    """One entry per label (several points of a system share one)."""
    handles, labels = axes.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    axes.legend(unique.values(), unique.keys(), fontsize=7)
