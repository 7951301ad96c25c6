"""Deep models: partitioner and compile time, peak and step time at depth.

    python -m benchmarks.deep [--models hf_llama hf_gpt2] [--layers 12] [--budgets 1 0.75 0.5 0.25 0]
        [--torch-budgets 0.5] [--steps 1] [--dim 128] [--seq 512] [--batch 2] [--vocab 512]
        [--out benchmarks/deep/results]

Per model (built from configs, full training, dropout off so every system compares with
eager): ``torch.compile`` (PyTorch's min-cut partitioner), ``torch.compile`` under
PyTorch's budget partitioner (``activation_memory_budget``, at each ``--torch-budgets``),
``torch.utils.checkpoint`` on every block (eager), and ours through Inductor at each
budget. Per system: the seconds spent inside the partitioner (measured around each
partitioner call, ours and PyTorch's alike), the first step (compile included), the
measured peak of the step after it (the one definition: profiler allocation events on
CPU), our predicted peak, the time of the steps after it (the median of ``--steps``), and
the largest gradient difference from eager. Caches are off, so every compile partitions.
Results: ``<out>/deep.json``, and the table on stdout and in ``<out>/RESULTS.md``;
progress on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from unittest import mock

import torch
from torch import nn

from benchmarks.harness import hf_models
from benchmarks.harness.checkpoint_flops import checkpoint_blocks
from benchmarks.harness.study import Row, Study, add_shape_arguments, per_model, progress
from benchmarks.harness.training import measured_step, peak_row, token_inputs
from recompute_pass import partitioner, recompute_backend
from recompute_pass import torch_internals as ti

MODELS = ("hf_llama", "hf_gpt2")


@contextlib.contextmanager
def partitioner_seconds() -> Iterator[list[float]]:
    """Seconds inside each partitioner call, ours (``partitioner.partition``) and PyTorch's
    (the min-cut partitioner Inductor calls), while the block runs."""
    spent: list[float] = []

    def timed(function: Callable[..., object]) -> Callable[..., object]:
        @functools.wraps(function)
        def call(*args: object, **kwargs: object) -> object:
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent.append(time.perf_counter() - start)

        return call

    ours = mock.patch.object(partitioner, "partition", timed(partitioner.partition))
    name = "min_cut_rematerialization_partition"
    theirs = mock.patch.object(ti.inductor_compile_fx, name, timed(getattr(ti.inductor_compile_fx, name)))
    with ours, theirs:
        yield spent


def run_model(name: str, args: argparse.Namespace) -> list[Row]:
    sizes = dict(layers=args.layers, dim=args.dim, seq=args.seq, vocab=args.vocab)
    inputs = token_inputs(args)
    rows: list[Row] = []

    def record(
        system: str,
        budget: float | None,
        step_of: Callable[[nn.Module], Callable],
        config: contextlib.AbstractContextManager[object] | None = None,
    ) -> None:
        """``config``: held while the model compiles and runs (PyTorch's budget)."""
        model, blocks = hf_models.recipe(name, **sizes)
        if system == "checkpoint":
            checkpoint_blocks(blocks)
        torch.compiler.reset()
        start = time.perf_counter()
        with (
            ti.inductor_config.patch(force_disable_caches=True),
            config or contextlib.nullcontext(),
            partitioner_seconds() as spent,
        ):
            step = step_of(model)
            peak, grads, reports = measured_step(model, inputs, step)
            first_and_measured = time.perf_counter() - start
            seconds = []
            for _ in range(args.steps):
                begin = time.perf_counter()
                step(*inputs).backward()
                seconds.append(time.perf_counter() - begin)
        report = reports[-1] if reports else None
        row = {
            **peak_row((name, system, budget), peak, grads, eager, report),
            "layers": args.layers,
            "partitioner_s": sum(spent),
            "first_steps_s": first_and_measured,  # the compiling step and the measured one
            "step_s": statistics.median(seconds),
            "step_samples_s": seconds,
            "recompute_flops": getattr(report, "recompute_flops", None),
            "plan": None if report is None else report.plan_digest,
            "notes": [] if report is None else list(report.notes),
        }
        rows.append(row)
        progress(json.dumps(row))

    model, _ = hf_models.recipe(name, **sizes)
    _, eager, _ = measured_step(model, inputs, model)
    record("compile", None, lambda m: torch.compile(m))
    for budget in args.torch_budgets:  # PyTorch's own budget partitioner (its knapsack over saved bytes)
        patch = ti.functorch_config.patch(activation_memory_budget=budget)
        record("compile_budget", budget, lambda m: torch.compile(m), patch)
    record("checkpoint", None, lambda m: m)
    for budget in args.budgets:
        options = recompute_backend.with_options(memory_budget=budget, fallback=False)
        record("recompute", budget, lambda m, o=options: torch.compile(m, backend=o))
    return rows


def table(rows: Sequence[Row]) -> str:
    """One row per system; partitioner and first-step seconds also as ratios to
    ``torch.compile``'s in the same run (same model and depth)."""
    lines = [
        "| model | layers | system | budget | partitioner s | x compile | first 2 steps s | x compile "
        "| step s | measured peak (B) | predicted (B) | error | recompute GFLOP | max grad diff |",
        "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    baseline = {(r["model"], r["layers"]): r for r in rows if r["system"] == "compile"}
    for r in rows:
        base = baseline.get((r["model"], r["layers"]))
        error = "" if r["error"] is None else f"{r['error']:+.2%}"
        predicted = "" if r["predicted_peak"] is None else f"{r['predicted_peak']:,}"
        budget = "" if r["budget"] is None else f"{r['budget']:g}"
        flops = "" if r["recompute_flops"] is None else f"{r['recompute_flops'] / 1e9:.2f}"
        ratios = [
            f"{r[key] / base[key]:.2f}"
            if base is not None and base[key] and r["system"] != "checkpoint"
            else ""
            for key in ("partitioner_s", "first_steps_s")
        ]
        lines.append(
            f"| {r['model']} | {r['layers']} | {r['system']} | {budget} | {r['partitioner_s']:.1f}"
            f" | {ratios[0]} | {r['first_steps_s']:.1f} | {ratios[1]} | {r['step_s']:.2f}"
            f" | {r['measured_peak']:,} | {predicted} | {error} | {flops} | {r['grad_error']:.1e} |"
        )
    return "\n".join(lines)


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--budgets", nargs="+", type=float, default=[1.0, 0.75, 0.5, 0.25, 0.0])
    parser.add_argument(
        "--torch-budgets", nargs="*", type=float, default=[0.5], help="PyTorch's activation_memory_budget"
    )
    parser.add_argument("--steps", type=int, default=1, help="steps timed after the measured one (median)")
    add_shape_arguments(parser, layers=12, seq=512)


def _unable(args: argparse.Namespace) -> str | None:
    if args.steps < 1:
        return "--steps must be at least 1"
    return None if hf_models.available() else "needs transformers (the bench extra)"


STUDY = Study("benchmarks.deep", __doc__, _arguments, per_model(run_model), table, _unable)
main = STUDY.main
