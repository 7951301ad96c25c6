"""One training step's memory over time: the partitioner's prediction against the profiler.

    python -m benchmarks.timeline --models llama gpt cnn --budgets 0,0.5,1 --out benchmarks/results/timeline

Each model and budget is compiled through Inductor (``recompute_backend``, peak budget by
default), run once to warm up, then once under the CPU profiler. The predicted timeline is
the report's ``peak_timeline`` (live bytes as each node runs); the measured one is the
level after each allocation event (``measure.step_timeline``). Both are drawn against the
progress through each phase (forward 0..1, backward 1..2), since one node of the graph is
many allocation events or none. Writes a PNG per model, ``RESULTS.md`` and
``timeline.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from benchmarks.cases import SIZES, bench_cases
from benchmarks.measure import step_timeline
from benchmarks.plots import plt
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
        axis.set_title(f"{t.model}, {t.mode} budget {t.budget:g}: peak {t.error:+.1%}")
        axis.set_xlabel("forward -> backward (progress through each phase)")
        axis.set_ylabel("live bytes above the step's start (MiB)")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["llama", "gpt", "cnn"])
    parser.add_argument("--budgets", default="0,0.5,1")
    parser.add_argument("--mode", default="peak", choices=("peak", "saved"))
    parser.add_argument("--size", default="full", choices=SIZES)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/out/timeline"))
    args = parser.parse_args(argv)
    torch._inductor.config.force_disable_caches = True
    args.out.mkdir(parents=True, exist_ok=True)
    budgets = [float(b) for b in args.budgets.split(",")]
    rows: list[Timeline] = []
    started = time.perf_counter()
    for model in args.models:
        per_model = []
        for budget in budgets:
            tick = time.perf_counter()
            t = measure_timeline(model, budget, args.mode, args.size)
            per_model.append(t)
            print(
                f"[{time.perf_counter() - started:6.0f}s] {model} b={budget:g}: predicted "
                f"{t.predicted_peak / MIB:.2f} MiB, measured {t.measured_peak / MIB:.2f} MiB "
                f"({t.error:+.1%}), {time.perf_counter() - tick:.0f}s",
                flush=True,
            )
        plot(per_model, args.out / f"{model}.png")
        rows += per_model
    (args.out / "timeline.json").write_text(json.dumps([asdict(t) for t in rows]))
    command = "python -m benchmarks.timeline " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = [
        "# Predicted against measured memory timeline (Inductor, CPU profiler)",
        "",
        f"Command: `{command}`  ",
        f"torch {torch.__version__}; wall time {time.perf_counter() - started:.0f} s",
        "",
        "| model | budget | predicted peak | measured peak | error |",
        "|---|---|---|---|---|",
        *(
            f"| {t.model} | {t.mode} {t.budget:g} | {t.predicted_peak / MIB:.2f} MiB | "
            f"{t.measured_peak / MIB:.2f} MiB | {t.error:+.1%} |"
            for t in rows
        ),
        "",
        *(f"![{m}]({m}.png)" for m in args.models),
        "",
    ]
    (args.out / "RESULTS.md").write_text("\n".join(lines))
    print(f"wrote {args.out}/RESULTS.md")


if __name__ == "__main__":
    main()
