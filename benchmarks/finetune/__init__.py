"""Fine-tuning: predicted against measured peak, beside torch.compile and checkpointing.

    python -m benchmarks.finetune [--models hf_llama_lora hf_llama_frozen] [--budgets 1 0.5 0]
        [--layers 2] [--dim 128] [--seq 128] [--batch 2] [--vocab 512] [--paths inductor graphs]
        [--out benchmarks/finetune/results]

Per model (``hf_models.recipe``: fine-tuning recipes built from configs): the measured
peak of eager, of ``torch.utils.checkpoint`` on every block (non-reentrant, as the ``checkpoint``
system), of ``torch.compile`` (PyTorch's partitioner), and ours at each budget, through
Inductor (``recompute_backend``) and without codegen (``recompute_eager_backend``), with
the report's predicted peak and the largest gradient difference from eager. The peak is
the one definition (README, "The peak"): profiler allocation events on CPU,
measured on the step after the compiling one. Results: ``<out>/finetune.json``, and the
table on stdout and in ``<out>/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence

import torch
from torch import nn

from benchmarks.harness import hf_models
from benchmarks.harness.checkpoint_flops import checkpoint_blocks
from benchmarks.harness.study import Row, Study, add_shape_arguments, per_model, progress
from benchmarks.harness.tables import peak_cells
from benchmarks.harness.training import measured_step, peak_row, token_inputs
from recompute_pass import recompute_backend, recompute_eager_backend
from recompute_pass import torch_internals as ti

MODELS = ("hf_llama_lora", "hf_llama_frozen")


def run_model(name: str, args: argparse.Namespace) -> list[Row]:
    sizes = dict(layers=args.layers, dim=args.dim, seq=args.seq, vocab=args.vocab)
    inputs = token_inputs(args)
    rows: list[Row] = []

    def record(
        system: str, budget: float | None, path: str, step_of: Callable[[nn.Module], Callable]
    ) -> None:
        model, blocks = hf_models.recipe(name, **sizes)
        if system == "checkpoint":
            checkpoint_blocks(blocks)
        torch.compiler.reset()
        with ti.inductor_config.patch(force_disable_caches=True):
            peak, grads, reports = measured_step(model, inputs, step_of(model))
        report = reports[-1] if reports and system == "recompute" else None
        row = {
            **peak_row((name, system, budget), peak, grads, eager, report),
            "path": path,
            "gradients": None if report is None else report.gradients.describe(),
            "plan": None if report is None else report.plan_digest,
        }
        rows.append(row)
        progress(json.dumps(row))

    model, _ = hf_models.recipe(name, **sizes)
    _, eager, _ = measured_step(model, inputs, model)
    record("eager", None, "eager", lambda m: m)
    record("checkpoint", None, "eager", lambda m: m)
    record("compile", None, "inductor", lambda m: torch.compile(m))
    for path in args.paths:
        backend = recompute_backend if path == "inductor" else recompute_eager_backend
        for budget in args.budgets:
            options = backend.with_options(memory_budget=budget, fallback=False)
            record("recompute", budget, path, lambda m, o=options: torch.compile(m, backend=o))
    return rows


def table(rows: Sequence[Row]) -> str:
    lines = [
        "| model | system | budget | path | measured peak (B) | predicted (B) | error | max grad diff |",
        "|---|---|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        budget, predicted, error = peak_cells(r)
        lines.append(
            f"| {r['model']} | {r['system']} | {budget} | {r['path']} | {r['measured_peak']:,} | {predicted}"
            f" | {error} | {r['grad_error']:.1e} |"
        )
    return "\n".join(lines)


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--budgets", nargs="+", type=float, default=[1.0, 0.5, 0.0])
    parser.add_argument("--paths", nargs="+", choices=("inductor", "graphs"), default=["inductor", "graphs"])
    add_shape_arguments(parser, layers=2, seq=128)


def _unable(args: argparse.Namespace) -> str | None:
    return None if hf_models.peft_available() else "needs transformers and peft (the bench extra)"


STUDY = Study("benchmarks.finetune", __doc__, _arguments, per_model(run_model), table, _unable)
main = STUDY.main
