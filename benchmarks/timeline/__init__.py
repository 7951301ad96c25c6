"""One training step's memory over time: the partitioner's prediction against the profiler.

    python -m benchmarks.timeline [--models llama gpt cnn] [--budgets 0,0.5,1] [--mode peak|saved]
        [--size full] [--out benchmarks/timeline/results]

Each model and budget is compiled through Inductor (``recompute_backend``, peak budget by
default), run once to warm up, then once under the CPU profiler. The predicted timeline is
the report's ``peak_timeline`` (live bytes as each node runs); the measured one is the
level after each allocation event (``meters.step_timeline``). Both are drawn against the
progress through each phase (forward 0..1, backward 1..2), since one node of the graph is
many allocation events or none. Writes a PNG per model, ``<out>/timeline.json`` and
``<out>/RESULTS.md``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch

from benchmarks.harness.cases import SIZES, bench_cases
from benchmarks.harness.meters import step_timeline
from benchmarks.harness.plots import finish, plt, save
from benchmarks.harness.study import Row, Study, progress
from recompute_pass import capture_reports, recompute_backend

MIB = 2**20


@dataclass(frozen=True)
class Timeline:
    model: str
    budget: float
    mode: str
    predicted_peak: int
    measured_peak: int
    predicted: list[tuple[str, int]]  # (phase, live bytes) per node
    measured: list[tuple[str, int]]  # (phase, level) per allocation event

    @property
    def error(self) -> float:
        return self.predicted_peak / self.measured_peak - 1 if self.measured_peak else 0.0


def measure_timeline(model_name: str, budget: float, mode: str, size: str) -> Timeline:
    case = bench_cases(size)[model_name]
    torch.manual_seed(0)
    model = case.build()
    inputs = case.inputs()
    torch.compiler.reset()
    backend = recompute_backend.with_options(memory_budget=budget, budget_mode=mode, fallback=False)
    compiled = torch.compile(model, backend=backend)
    with capture_reports() as reports:
        compiled(*inputs).backward()
    if len(reports) != 1 or reports[0].predicted_peak_bytes is None:
        raise RuntimeError(f"{model_name}: expected one partitioned graph, got {len(reports)} reports")
    model.zero_grad(set_to_none=True)
    measured, _ = step_timeline(lambda: compiled(*inputs), lambda loss: loss.backward())
    model.zero_grad(set_to_none=True)
    report = reports[0]
    return Timeline(
        model=model_name,
        budget=budget,
        mode=mode,
        predicted_peak=report.predicted_peak_bytes or 0,
        measured_peak=max([0, *(level for _, level in measured)]),
        predicted=[(phase, live) for phase, _, live in report.peak_timeline],
        measured=measured,
    )


def _progress(points: Sequence[tuple[str, int]]) -> tuple[list[float], list[float]]:
    """x: forward in [0, 1), backward in [1, 2), by position within the phase."""
    counts = {phase: sum(p == phase for p, _ in points) for phase in ("forward", "backward")}
    seen = {"forward": 0, "backward": 0}
    xs, ys = [], []
    for phase, level in points:
        xs.append((phase == "backward") + seen[phase] / max(1, counts[phase]))
        seen[phase] += 1
        ys.append(level / MIB)
    return xs, ys


def plot(timelines: Sequence[Timeline], out: Path) -> Path:
    fig, axes = plt.subplots(1, len(timelines), figsize=(5.5 * len(timelines), 4.2), squeeze=False)
    for axis, t in zip(axes[0], timelines, strict=True):
        axis.step(*_progress(t.measured), where="post", color="tab:blue", label="measured (profiler)")
        axis.step(*_progress(t.predicted), where="post", color="tab:orange", label="predicted (liveness)")
        axis.axhline(t.measured_peak / MIB, color="tab:blue", linestyle=":", linewidth=1)
        axis.axhline(t.predicted_peak / MIB, color="tab:orange", linestyle=":", linewidth=1)
        axis.axvline(1.0, color="grey", linewidth=0.8)
        finish(
            axis,
            "forward -> backward (progress through each phase)",
            "live bytes above the step's start (MiB)",
            f"{t.model}, {t.mode} budget {t.budget:g}: peak {t.error:+.1%}",
        )
    return save(fig, out, dpi=110)


def measure(args: argparse.Namespace) -> list[Row]:
    torch._inductor.config.force_disable_caches = True
    budgets = [float(b) for b in args.budgets.split(",")]
    rows: list[Row] = []
    for model in args.models:
        per_model = []
        for budget in budgets:
            t = measure_timeline(model, budget, args.mode, args.size)
            per_model.append(t)
            progress(
                f"{model} b={budget:g}: predicted {t.predicted_peak / MIB:.2f} MiB, "
                f"measured {t.measured_peak / MIB:.2f} MiB ({t.error:+.1%})"
            )
        args.out.mkdir(parents=True, exist_ok=True)
        plot(per_model, args.out / f"{model}.png")
        rows += [asdict(t) for t in per_model]
    return rows


def table(rows: Sequence[Row]) -> str:
    timelines = [Timeline(**{f.name: r[f.name] for f in fields(Timeline)}) for r in rows]  # type: ignore[arg-type]
    models = list(dict.fromkeys(t.model for t in timelines))
    return "\n".join(
        [
            "| model | budget | predicted peak | measured peak | error |",
            "|---|---|---|---|---|",
            *(
                f"| {t.model} | {t.mode} {t.budget:g} | {t.predicted_peak / MIB:.2f} MiB | "
                f"{t.measured_peak / MIB:.2f} MiB | {t.error:+.1%} |"
                for t in timelines
            ),
            "",
            *(f"![{m}]({m}.png)" for m in models),
        ]
    )


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--models", nargs="+", default=["llama", "gpt", "cnn"])
    parser.add_argument("--budgets", default="0,0.5,1")
    parser.add_argument("--mode", default="peak", choices=("peak", "saved"))
    parser.add_argument("--size", default="full", choices=SIZES)


STUDY = Study("benchmarks.timeline", __doc__, _arguments, measure, table)
main = STUDY.main
