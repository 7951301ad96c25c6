"""Architectures beyond the zoo: predicted against measured peak, and gradients, at depth.

    python -m benchmarks.architectures [--models qwen2 gemma phi gpt_neox opt bert mixtral]
        [--budgets 1 0.5 0] [--layers 4] [--dim 64] [--seq 128] [--batch 2] [--vocab 512]
        [--out benchmarks/architectures/results]

The zoo's Llama and GPT-2 are what the partitioner was measured on; these models
(``hf_models.ARCHITECTURES``, Hugging Face models from small configs) check that nothing is
tuned to them: grouped-query attention, a tied head under a pointwise RMSNorm, parallel
blocks, an encoder, a mixture of experts. From 4 layers on, every budget below 1 composes
its peaks from the repeated blocks' pieces (``memory.composed``). Per model: the measured
peak of eager and of ``torch.compile``, and ours through Inductor at each budget with the
report's predicted peak, the largest gradient difference from eager, and the audit's verdict
on the composition (``memory.audit``: a warning when it is more than 1% from the compiled
graphs' own memory plan). Peak: the one definition, on the step after the compiling one.
Results: ``<out>/architectures.json``, and the table on stdout and in ``<out>/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence

import torch

from benchmarks.harness import hf_models
from benchmarks.harness.meters import warnings_logged
from benchmarks.harness.study import Row, Study, add_shape_arguments, per_model, progress
from benchmarks.harness.tables import peak_cells
from benchmarks.harness.training import measured_step, peak_row, token_inputs
from recompute_pass import recompute_backend
from recompute_pass import torch_internals as ti


def run_model(name: str, args: argparse.Namespace) -> list[Row]:
    inputs = token_inputs(args)
    shape = dict(vocab=args.vocab, dim=args.dim, heads=4, layers=args.layers)

    def build() -> torch.nn.Module:
        torch.manual_seed(0)
        return hf_models.architecture(name, **shape)

    model = build()
    eager_peak, eager, _ = measured_step(model, inputs, model)
    rows: list[Row] = []
    systems = [("compile", None, None)] + [("recompute", b, recompute_backend) for b in args.budgets]
    for system, budget, backend in systems:
        model = build()
        torch.compiler.reset()
        options = None if backend is None else backend.with_options(memory_budget=budget, fallback=False)
        started = time.perf_counter()
        with warnings_logged() as warnings, ti.inductor_config.patch(force_disable_caches=True):
            compiled = torch.compile(model, backend=options or "inductor")
            peak, grads, reports = measured_step(model, inputs, compiled)
        report = reports[-1] if reports and system == "recompute" else None
        row = {
            **peak_row((name, system, budget), peak, grads, eager, report),
            "eager_peak": eager_peak,
            "graphs": len(reports),
            "checked": next((n for n in getattr(report, "notes", ()) if n.startswith("peak search")), None),
            "warnings": warnings,
            "seconds": round(time.perf_counter() - started, 1),
        }
        rows.append(row)
        progress(json.dumps(row))
    return rows


def table(rows: Sequence[Row]) -> str:
    lines = [
        "| model | system | budget | measured peak (B) | x eager | predicted (B) | error | max grad diff "
        "| warnings |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        budget, predicted, error = peak_cells(r)
        ratio = r["measured_peak"] / r["eager_peak"]
        lines.append(
            f"| {r['model']} | {r['system']} | {budget} | {r['measured_peak']:,} | {ratio:.2f} | {predicted}"
            f" | {error} | {r['grad_error']:.1e} | {len(r['warnings'])} |"
        )
    return "\n".join(lines)


def _arguments(parser: argparse.ArgumentParser) -> None:
    names = list(hf_models.ARCHITECTURES)
    parser.add_argument("--models", nargs="+", choices=names, default=names)
    parser.add_argument("--budgets", nargs="+", type=float, default=[1.0, 0.5, 0.0])
    add_shape_arguments(parser, layers=4, seq=128, dim=64)


def _unable(args: argparse.Namespace) -> str | None:
    return None if hf_models.available() else "needs transformers (the bench extra)"


STUDY = Study("benchmarks.architectures", __doc__, _arguments, per_model(run_model), table, _unable)
main = STUDY.main
