"""Demo: train a small GPT with ``recompute_backend`` at a few memory budgets.

    python -m benchmarks.demo [--budgets 1 0.5 0] [--steps 3] [--no-inductor] [--out DIR]

For each budget it compiles the model (Inductor generates the kernels, our partitioner
decides what is saved), trains a few steps, prints the partition report, and at the end
a trade-off table and a plot of saved bytes against recompute FLOPs.
"""

from __future__ import annotations

import argparse
import copy
import time
from pathlib import Path

import torch

from benchmarks.measure import saved_activation_bytes
from benchmarks.models import GPT, GPTConfig
from recompute_pass import PartitionReport, capture_reports, recompute_backend, recompute_eager_backend
from recompute_pass import torch_internals as ti


def train(model: torch.nn.Module, backend: object, steps: int, batch: int) -> tuple[list[float], int, float]:
    """Losses, activation bytes held for backward, and compile+train seconds."""
    compiled = torch.compile(model, backend=backend)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    cfg: GPTConfig = model.cfg
    generator = torch.Generator().manual_seed(1)
    losses, saved = [], 0
    start = time.perf_counter()
    for _ in range(steps):
        idx = torch.randint(0, cfg.vocab, (batch, cfg.seq), generator=generator)
        loss = compiled(idx, torch.roll(idx, -1, dims=1))
        saved = saved_activation_bytes(loss, exclude=[*model.parameters(), *model.buffers()])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses, saved, time.perf_counter() - start


def plot(points: list[tuple[float, PartitionReport]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [r.saved_bytes / 1024 for _, r in points]
    ys = [r.recompute_flops / 1e6 for _, r in points]
    ax.plot(xs, ys, "o-")
    for (budget, _), x, y in zip(points, xs, ys, strict=True):
        ax.annotate(f"budget {budget:g}", (x, y), textcoords="offset points", xytext=(5, 5))
    ax.set_xlabel("activations saved for backward (KiB)")
    ax.set_ylabel("recomputed in backward (MFLOP)")
    ax.set_title("nanoGPT: what each memory budget buys")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--budgets", type=float, nargs="+", default=[1.0, 0.5, 0.0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--no-inductor", action="store_true", help="run the graphs without codegen (fast)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    args = parser.parse_args()

    torch.manual_seed(0)
    base = GPT(GPTConfig(layers=args.layers, dim=128, seq=64, vocab=256))
    # No fallback: the demo shows our plans, and a fallback report has no numbers to plot.
    backend = recompute_eager_backend if args.no_inductor else recompute_backend
    backend = backend.with_options(fallback=False)
    points: list[tuple[float, PartitionReport]] = []
    rows = []
    for budget in args.budgets:
        print(f"\n=== memory_budget={budget:g}: compiling and training {args.steps} steps ...", flush=True)
        torch.compiler.reset()
        torch.manual_seed(0)  # same dropout masks for every budget
        with ti.inductor_config.patch(force_disable_caches=True), capture_reports() as reports:
            losses, saved, seconds = train(
                copy.deepcopy(base), backend.with_options(memory_budget=budget), args.steps, args.batch
            )
        for report in reports:
            print(report.to_text())
        report = reports[0]
        points.append((budget, report))
        rows.append((budget, report, saved, losses, seconds))

    print("\nbudget  saved (report)  saved (measured)  recompute FLOP  est. time   losses")
    for budget, report, saved, losses, seconds in rows:
        print(
            f"{budget:6g}  {report.saved_bytes:14,}  {saved:16,}  {report.recompute_flops:14,}  "
            f"{report.estimated_recompute_time * 1e6:7.1f} us  {' '.join(f'{x:.3f}' for x in losses)}"
            f"  ({seconds:.0f}s)"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "demo_tradeoff.png"
    plot(points, path)
    print(f"\nplot: {path}")


if __name__ == "__main__":
    main()
