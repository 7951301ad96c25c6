"""Fine-tuning: predicted against measured peak, beside torch.compile and checkpointing.

    python -m benchmarks.finetune [--models hf_llama_lora hf_llama_frozen] [--budgets 1 0.5 0]
        [--layers 2] [--dim 128] [--seq 128] [--batch 2] [--vocab 512] [--paths inductor graphs]
        [--out benchmarks/results/finetune]

Per model (``benchmarks.cases`` fine-tuning recipes, built from configs): the measured peak
of eager, of ``torch.utils.checkpoint`` on every block (non-reentrant, as the ``checkpoint``
system), of ``torch.compile`` (PyTorch's partitioner), and ours at each budget, through
Inductor (``recompute_backend``) and without codegen (``recompute_eager_backend``), with
the report's predicted peak and the largest gradient difference from eager. The peak is
the one definition (README, "Budget semantics"): profiler allocation events on CPU,
measured on the step after the compiling one. Results: ``<out>/finetune.json`` and a
table on stdout (the figures ``RESULTS.md`` quotes).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch import nn

from benchmarks import hf_models
from benchmarks.checkpoint_flops import checkpoint_blocks
from benchmarks.measure import step_memory
from recompute_pass import capture_reports, recompute_backend, recompute_eager_backend
from recompute_pass import torch_internals as ti

MODELS = ("hf_llama_lora", "hf_llama_frozen")


def build(name: str, *, layers: int, dim: int, seq: int, vocab: int) -> tuple[nn.Module, list[nn.Module]]:
    """A fine-tuning model by name and its blocks (what checkpointing wraps)."""
    arch, _, recipe = name.removeprefix("hf_").partition("_")
    shape = dict(vocab=vocab, seq=seq, dim=dim, heads=4, layers=layers)
    hidden = (8 * dim // 3 + 7) // 8 * 8
    torch.manual_seed(0)
    if arch == "llama":
        model, blocks = hf_models.llama(**shape, hidden=hidden), hf_models.llama_blocks
    elif arch == "gpt2":
        model, blocks = hf_models.gpt2(**shape), hf_models.gpt2_blocks
        for module in model.modules():  # no dropout: every system compares with eager
            if isinstance(module, nn.Dropout):
                module.p = 0.0
    else:
        raise ValueError(f"unknown model {name!r}")
    if recipe == "frozen":
        return hf_models.freeze_lower(model, blocks(model)), blocks(model)
    if recipe in ("lora", "lora_all"):
        targets = (hf_models.LORA_ATTENTION if recipe == "lora" else hf_models.LORA_ALL_LINEAR)[arch]
        model = hf_models.lora(model, targets)
        return model, hf_models.peft_blocks(model)
    if recipe == "":
        return model, blocks(model)
    raise ValueError(f"unknown recipe in {name!r}")


def measure(
    model: nn.Module, inputs: tuple[torch.Tensor, ...], step: Callable[..., torch.Tensor]
) -> tuple[int, dict[str, torch.Tensor], list[object]]:
    """Peak of the step after a first (compiling) one, its gradients, and the reports."""
    with capture_reports() as reports:
        step(*inputs).backward()
    for parameter in model.parameters():
        parameter.grad = None
    memory, _ = step_memory(lambda: step(*inputs), lambda loss: loss.backward(), torch.device("cpu"))
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return memory.peak_bytes, grads, list(reports)


def grad_error(grads: dict[str, torch.Tensor], eager: dict[str, torch.Tensor]) -> float:
    if grads.keys() != eager.keys():
        return float("inf")  # a gradient missing, or one for a frozen parameter
    return max((float((grads[n] - g).abs().max()) for n, g in eager.items()), default=0.0)


def token_inputs(args: argparse.Namespace) -> tuple[torch.Tensor, torch.Tensor]:
    """The benchmark's ``(tokens, targets)`` at ``--batch`` x ``--seq``, the same in every run."""
    torch.manual_seed(1)
    size = (args.batch, args.seq)
    return torch.randint(0, args.vocab, size), torch.randint(0, args.vocab, size)


def add_shape_arguments(parser: argparse.ArgumentParser, *, layers: int, seq: int, out: Path) -> None:
    """The model-shape options (and ``--out``) the HF-model benchmarks share."""
    parser.add_argument("--layers", type=int, default=layers)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--seq", type=int, default=seq)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=512)
    parser.add_argument("--out", type=Path, default=out)


def save_rows(out: Path, module: str, argv: Sequence[str] | None, rows: list[dict[str, object]]) -> None:
    """``<out>/<name>.json``: the rows, and the command and torch that measured them."""
    out.mkdir(parents=True, exist_ok=True)
    command = f"python -m {module} " + shlex.join(argv if argv is not None else sys.argv[1:])
    meta = {"command": command, "torch": torch.__version__, "threads": torch.get_num_threads()}
    name = module.rsplit(".", 1)[-1]
    (out / f"{name}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")


def run_model(name: str, args: argparse.Namespace) -> list[dict[str, object]]:
    sizes = dict(layers=args.layers, dim=args.dim, seq=args.seq, vocab=args.vocab)
    inputs = token_inputs(args)
    rows: list[dict[str, object]] = []

    def record(
        system: str, budget: float | None, path: str, step_of: Callable[[nn.Module], Callable]
    ) -> None:
        model, blocks = build(name, **sizes)
        if system == "checkpoint":
            checkpoint_blocks(blocks)
        torch.compiler.reset()
        with ti.inductor_config.patch(force_disable_caches=True):
            peak, grads, reports = measure(model, inputs, step_of(model))
        report = reports[-1] if reports and system == "recompute" else None
        predicted = getattr(report, "predicted_peak_bytes", None)
        row = {
            "model": name,
            "system": system,
            "budget": budget,
            "path": path,
            "measured_peak": peak,
            "predicted_peak": predicted,
            "error": None if predicted is None else predicted / peak - 1,
            "grad_error": grad_error(grads, eager),
            "gradients": None if report is None else report.gradients.describe(),
            "plan": None if report is None else report.plan_digest,
        }
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)

    model, _ = build(name, **sizes)
    _, eager, _ = measure(model, inputs, model)
    record("eager", None, "eager", lambda m: m)
    record("checkpoint", None, "eager", lambda m: m)
    record("compile", None, "inductor", lambda m: torch.compile(m))
    for path in args.paths:
        backend = recompute_backend if path == "inductor" else recompute_eager_backend
        for budget in args.budgets:
            options = backend.with_options(memory_budget=budget, fallback=False)
            record("recompute", budget, path, lambda m, o=options: torch.compile(m, backend=o))
    return rows


def peak_cells(row: dict[str, object]) -> tuple[str, str, str]:
    """A row's budget, predicted peak and error as table cells (empty where absent)."""
    budget, predicted, error = row["budget"], row["predicted_peak"], row["error"]
    return (
        "" if budget is None else f"{budget:g}",
        "" if predicted is None else f"{predicted:,}",
        "" if error is None else f"{error:+.2%}",
    )


def table(rows: Sequence[dict[str, object]]) -> str:
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--budgets", nargs="+", type=float, default=[1.0, 0.5, 0.0])
    parser.add_argument("--paths", nargs="+", choices=("inductor", "graphs"), default=["inductor", "graphs"])
    add_shape_arguments(parser, layers=2, seq=128, out=Path("benchmarks/results/finetune"))
    args = parser.parse_args(argv)
    if not hf_models.peft_available():
        parser.error("needs transformers and peft (the bench extra)")
    rows = [row for name in args.models for row in run_model(name, args)]
    save_rows(args.out, "benchmarks.finetune", argv, rows)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
