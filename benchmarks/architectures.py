"""Architectures beyond the zoo: predicted against measured peak, and gradients, at depth.

    python -m benchmarks.architectures [--models qwen2 gemma phi gpt_neox opt bert mixtral]
        [--budgets 1 0.5 0] [--layers 4] [--dim 64] [--seq 128] [--batch 2] [--vocab 512]
        [--out benchmarks/results/architectures]

The zoo's Llama and GPT-2 are what the partitioner was measured on; these models
(``hf_models.ARCHITECTURES``, Hugging Face models from small configs) check that nothing is
tuned to them: grouped-query attention, a tied head under a pointwise RMSNorm, parallel
blocks, an encoder, a mixture of experts. From 4 layers on, every budget below 1 composes
its peaks from the repeated blocks' pieces (``memory.composed``). Per model: the measured
peak of eager and of ``torch.compile``, and ours through Inductor at each budget with the
report's predicted peak, the largest gradient difference from eager, and the audit's verdict
on the composition (``memory.audit``: a warning when it is more than 1% from the compiled
graphs' own memory plan). Peak: the one definition, on the step after the compiling one.
Results: ``<out>/architectures.json`` and a table on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from benchmarks import hf_models
from benchmarks.finetune import add_shape_arguments, grad_error, measure, peak_cells, save_rows, token_inputs
from benchmarks.measure import warnings_logged
from recompute_pass import recompute_backend
from recompute_pass import torch_internals as ti


def run_model(name: str, args: argparse.Namespace) -> list[dict[str, object]]:
    inputs = token_inputs(args)
    shape = dict(vocab=args.vocab, dim=args.dim, heads=4, layers=args.layers)

    def build() -> torch.nn.Module:
        torch.manual_seed(0)
        return hf_models.architecture(name, **shape)

    model = build()
    eager_peak, eager, _ = measure(model, inputs, model)
    rows: list[dict[str, object]] = []
    systems = [("compile", None, None)] + [("recompute", b, recompute_backend) for b in args.budgets]
    for system, budget, backend in systems:
        model = build()
        torch.compiler.reset()
        options = None if backend is None else backend.with_options(memory_budget=budget, fallback=False)
        started = time.perf_counter()
        with warnings_logged() as warnings, ti.inductor_config.patch(force_disable_caches=True):
            compiled = torch.compile(model, backend=options or "inductor")
            peak, grads, reports = measure(model, inputs, compiled)
        report = reports[-1] if reports and system == "recompute" else None
        predicted = getattr(report, "predicted_peak_bytes", None)
        row = {
            "model": name,
            "system": system,
            "budget": budget,
            "eager_peak": eager_peak,
            "measured_peak": peak,
            "predicted_peak": predicted,
            "error": None if predicted is None else predicted / peak - 1,
            "grad_error": grad_error(grads, eager),
            "graphs": len(reports),
            "checked": next((n for n in getattr(report, "notes", ()) if n.startswith("peak search")), None),
            "warnings": warnings,
            "seconds": round(time.perf_counter() - started, 1),
        }
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def table(rows: Sequence[dict[str, object]]) -> str:
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    names = list(hf_models.ARCHITECTURES)
    parser.add_argument("--models", nargs="+", choices=names, default=names)
    parser.add_argument("--budgets", nargs="+", type=float, default=[1.0, 0.5, 0.0])
    add_shape_arguments(parser, layers=4, seq=128, out=Path("benchmarks/results/architectures"))
    parser.set_defaults(dim=64)
    args = parser.parse_args(argv)
    if not hf_models.available():
        parser.error("needs transformers (the bench extra)")
    rows = []
    for number, name in enumerate(args.models, start=1):
        print(f"[{number}/{len(args.models)}] {name}", file=sys.stderr, flush=True)
        rows += run_model(name, args)
    save_rows(args.out, "benchmarks.architectures", argv, rows)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
