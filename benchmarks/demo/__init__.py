"""Demo: train a small GPT with ``recompute_backend`` at a few memory budgets.

    python -m benchmarks.demo [--budgets 1 0.5 0] [--steps 3] [--no-inductor] [--out DIR]

For each budget it compiles the model (Inductor generates the kernels, our partitioner
decides what is saved), trains a few steps and prints the partition report; then it runs
the same steps under plain ``torch.compile`` and under eager with ``torch.utils.checkpoint``
around each block. The table shows, per system, the step's predicted and measured peak
(``benchmarks.harness.meters.step_memory``: bytes above the level before the forward), its
time and the FLOPs recomputed in backward; the plot (``<out>/demo_tradeoff.png``) is peak
against step time. Reports and the table go to stdout, progress to stderr.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from benchmarks.harness.checkpoint_flops import block_forward_flops, checkpoint_blocks
from benchmarks.harness.meters import step_memory
from benchmarks.harness.models import GPT, GPTConfig
from benchmarks.harness.plots import finish, plt, save
from benchmarks.harness.study import parser, progress
from recompute_pass import capture_reports, recompute_backend, recompute_eager_backend


@dataclass(frozen=True)
class Row:
    label: str
    budget: float | None  # ours: the memory budget; None for the systems beside it
    predicted_peak: int | None  # ours: the report's prediction
    measured_peak: int
    step_seconds: float  # median of the steps after the compiling one
    recompute_flops: int | None  # None: unknown (PyTorch's partitioner says nothing)
    losses: tuple[float, ...]
    seconds: float  # compile + train + measure, wall clock


def _batches(cfg: GPTConfig, steps: int, batch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    out = []
    for _ in range(steps):
        idx = torch.randint(0, cfg.vocab, (batch, cfg.seq), generator=generator)
        out.append((idx, torch.roll(idx, -1, dims=1)))
    return out


def train(
    model: torch.nn.Module,
    step_fn: Callable[..., torch.Tensor],
    batches: list[tuple[torch.Tensor, torch.Tensor]],
) -> tuple[list[float], float, int]:
    """Losses, the median step time after the first (compiling) step, and the measured peak
    of one more step (parameter ``.grad``s None before it, as everywhere)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses, times = [], []
    for idx, target in batches:
        start = time.perf_counter()
        loss = step_fn(idx, target)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
        losses.append(loss.item())
    idx, target = batches[0]
    memory, _ = step_memory(lambda: step_fn(idx, target), lambda loss: loss.backward(), torch.device("cpu"))
    optimizer.zero_grad(set_to_none=True)
    return losses, statistics.median(times[1:] or times), memory.peak_bytes


def plot(rows: list[Row], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ours = [r for r in rows if r.budget is not None]
    xs = [r.step_seconds * 1e3 for r in ours]
    ax.plot(xs, [r.measured_peak / 1024 for r in ours], "o-", label="recompute: measured peak")
    predicted = [(x, r.predicted_peak / 1024) for x, r in zip(xs, ours, strict=True) if r.predicted_peak]
    if predicted:
        ax.plot(*zip(*predicted, strict=True), "x", color="C0", label="recompute: predicted peak")
    for r, x in zip(ours, xs, strict=True):
        ax.annotate(
            f"budget {r.budget:g}", (x, r.measured_peak / 1024), textcoords="offset points", xytext=(5, 5)
        )
    for k, r in enumerate(r for r in rows if r.budget is None):
        ax.plot([r.step_seconds * 1e3], [r.measured_peak / 1024], "s", color=f"C{k + 1}", label=r.label)
    finish(
        ax,
        "step time (ms, median after the compiling step; CPU shared)",
        "peak memory of the step (KiB)",
        "nanoGPT: what each memory budget buys",
    )
    return save(fig, path)


def _kib(n: int | None) -> str:
    return "-" if n is None else f"{n / 1024:,.1f}"


def main(argv: Sequence[str] | None = None) -> int:
    made = parser("benchmarks.demo", __doc__, out=Path("benchmarks/out"))
    made.add_argument("--budgets", type=float, nargs="+", default=[1.0, 0.5, 0.0])
    made.add_argument("--steps", type=int, default=3)
    made.add_argument("--batch", type=int, default=8)
    made.add_argument("--layers", type=int, default=2)
    made.add_argument("--no-inductor", action="store_true", help="run the graphs without codegen (fast)")
    args = made.parse_args(argv)

    torch.manual_seed(0)
    cfg = GPTConfig(layers=args.layers, dim=128, seq=64, vocab=256)
    base = GPT(cfg)
    batches = _batches(cfg, args.steps, args.batch)
    # No fallback: the demo shows our plans, and a fallback report has no numbers to show.
    backend = recompute_eager_backend if args.no_inductor else recompute_backend
    backend = backend.with_options(fallback=False)
    rows: list[Row] = []
    for budget in args.budgets:
        progress(f"memory_budget={budget:g}: compiling and training {args.steps} steps ...")
        torch.compiler.reset()
        torch.manual_seed(0)  # same dropout masks for every system
        start = time.perf_counter()
        model = copy.deepcopy(base)
        compiled = torch.compile(model, backend=backend.with_options(memory_budget=budget))
        with capture_reports() as reports:
            losses, step, peak = train(model, compiled, batches)
        for report in reports:
            print(report.to_text())
        report = reports[0]  # the step is one graph
        rows.append(
            Row(
                f"recompute @ {budget:g}",
                budget,
                report.predicted_peak_bytes,
                peak,
                step,
                report.recompute_flops,
                tuple(losses),
                time.perf_counter() - start,
            )
        )

    progress("beside it: torch.compile (PyTorch's partitioner), eager with checkpoint per block ...")
    torch.compiler.reset()
    torch.manual_seed(0)
    start = time.perf_counter()
    model = copy.deepcopy(base)
    plain = "aot_eager_decomp_partition" if args.no_inductor else "inductor"
    losses, step, peak = train(model, torch.compile(model, backend=plain), batches)
    label = "torch.compile" + (" (no codegen)" if args.no_inductor else "")
    rows.append(Row(label, None, None, peak, step, None, tuple(losses), time.perf_counter() - start))
    torch.manual_seed(0)
    start = time.perf_counter()
    model = copy.deepcopy(base)
    counted = copy.deepcopy(base)
    flops = block_forward_flops(counted, list(counted.blocks), batches[0])
    checkpoint_blocks(list(model.blocks))
    losses, step, peak = train(model, model, batches)
    rows.append(
        Row(
            "eager + checkpoint/block",
            None,
            None,
            peak,
            step,
            flops,
            tuple(losses),
            time.perf_counter() - start,
        )
    )

    columns = ("system", "predicted peak", "measured peak", "step", "recompute FLOP")
    print("\npeaks in KiB (bytes above the level before the forward); step: median after the compiling one")
    print(f"{columns[0]:26}  {columns[1]:>14}  {columns[2]:>13}  {columns[3]:>8}  {columns[4]:>14}  losses")
    for r in rows:
        flops = "-" if r.recompute_flops is None else f"{r.recompute_flops:,}"
        print(
            f"{r.label:26}  {_kib(r.predicted_peak):>14}  {_kib(r.measured_peak):>13}  "
            f"{r.step_seconds * 1e3:6.1f}ms  {flops:>14}  "
            f"{' '.join(f'{x:.3f}' for x in r.losses)}  ({r.seconds:.0f}s)"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"\nplot: {plot(rows, args.out / 'demo_tradeoff.png')}")
    return 0
