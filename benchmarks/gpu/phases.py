"""The phases of ``benchmarks.gpu``, each run by it in a process of its own:

    python -m benchmarks.gpu.phases PHASE --out DIR [--dry-run] [--seconds S]

A phase writes ``DIR/<phase>.json`` again after every configuration it measures, so a
phase stopped at its time limit keeps what it had measured. Every measurement is the
harness's (``benchmarks.harness.training``): eager reference gradients from the same
weights, inputs and seed; a first step that compiles; the peak of the step after it
(``meters.step_memory``: on CUDA ``max_memory_allocated`` above ``memory_allocated``
before the step, after ``reset_peak_memory_stats``; the loss held through backward,
``.grad``s None before it; on CPU the profiler's allocation events); then timed steps
(median).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import gc
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from benchmarks import longest_sequence
from benchmarks.frontier import Plan, execute, plan_configs
from benchmarks.frontier.worker import record_of
from benchmarks.harness import hf_models, training
from benchmarks.harness.cases import bench_cases
from benchmarks.harness.checkpoint_flops import checkpoint_blocks
from benchmarks.harness.partition_stats import BudgetedMinCut, RecordingPartitioner
from benchmarks.harness.records import GRAD_TOLERANCE
from benchmarks.harness.study import Row, progress
from benchmarks.harness.systems import make_backend
from recompute_pass import recompute_backend, recompute_eager_backend
from recompute_pass import torch_internals as ti

SEED, STEP_SEED = 0, 2


@dataclass(frozen=True)
class Settings:
    """What a run measures on: the GPU's sizes, or the dry run's (CPU, toy sizes, the
    partitioned graphs run without codegen so that it takes seconds)."""

    device: str
    path: str  # "inductor" (Inductor's codegen) or "graphs" (no codegen)
    layers: int  # phases 1 and 2: HF Llama and GPT-2 from configs
    dim: int
    heads: int
    seq: int
    batch: int
    vocab: int
    autocast: bool  # the forward under bf16 autocast
    steps: int  # timed steps, their median reported
    zoo_size: str  # phases 3 and 5: ``benchmarks.harness.cases`` size of the zoo's models
    longest: dict[str, object]  # phase 4: ``benchmarks.longest_sequence``'s options


# The GPU's run: the sizes in phases 1 and 2 (HF models: layers, width, heads,
# tokens, batch, vocabulary), the zoo's ``large`` size in 3 and 5, a 4 GiB cap in 4.
GPU = Settings(
    "cuda", "inductor", 12, 1024, 16, 2048, 1, 32000, autocast=True, steps=10, zoo_size="large",
    longest={"model": "llama", "size": "large", "batch": 4, "layers": 2, "cap": 4 << 30, "low": 512,
             "high": 16384, "multiple": 512},
)  # fmt: skip
# The dry run: the same phases at the tests' size, on CPU, without codegen.
DRY_RUN = Settings(
    "cpu", "graphs", 2, 64, 4, 64, 2, 128, autocast=False, steps=2, zoo_size="quick",
    longest={"model": "llama", "size": "quick", "batch": 2, "layers": 2, "cap": 1 << 20, "low": 16,
             "high": 64, "multiple": 16},
)  # fmt: skip


class Rows:
    """A phase's rows, written to ``<out>/<phase>.json`` after each one."""

    def __init__(self, path: Path) -> None:
        self.path, self.rows = path, []

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        self.path.write_text(json.dumps(self.rows, indent=1, default=str))
        progress(json.dumps(row, default=str)[:300])
        return row


class Autocast(nn.Module):
    """``model`` with its forward under bf16 autocast (``enabled``), as a training loop runs it."""

    def __init__(self, model: nn.Module, device: str, enabled: bool) -> None:
        super().__init__()
        self.model, self.device_type, self.enabled = model, device, enabled

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        with torch.autocast(self.device_type, dtype=torch.bfloat16, enabled=self.enabled):
            return self.model(*args)


def hf_model(name: str, s: Settings) -> tuple[nn.Module, Callable[[nn.Module], list[nn.Module]]]:
    """``hf_llama`` or ``hf_gpt2`` (dropout off) at the run's size, on its device, and where
    its blocks are (for per-block checkpointing)."""
    model, _ = hf_models.recipe(name, layers=s.layers, dim=s.dim, seq=s.seq, vocab=s.vocab, heads=s.heads)
    blocks = hf_models.llama_blocks if name == "hf_llama" else hf_models.gpt2_blocks
    return Autocast(model.to(s.device), s.device, s.autocast), lambda m: blocks(m.model)


def ours(s: Settings, **options: object) -> Callable[..., object]:
    """``recompute_backend`` (``recompute_eager_backend`` without codegen) with ``options``."""
    backend = recompute_backend if s.path == "inductor" else recompute_eager_backend
    return backend.with_options(fallback=False, **options)


def pytorch(s: Settings, budget: float | None) -> Callable[..., object]:
    """``torch.compile``'s partitioner, under ``activation_memory_budget=budget`` if given."""
    profile = training.profile_name(torch.device(s.device))
    return make_backend(RecordingPartitioner(BudgetedMinCut(budget), device=profile), s.path)


def measure_system(
    label: Row, model: nn.Module, fn: Callable[..., torch.Tensor], inputs: tuple, eager: dict, s: Settings
) -> Row:
    """One system's row: its peak, the prediction (ours), gradients against eager, step time."""
    started = time.perf_counter()
    steps = training.Steps(model, fn, inputs, STEP_SEED, torch.device(s.device))
    first = steps.first(walk=False)
    memory, _ = steps.memory()
    median, iqr = training.median_and_iqr(steps.timed(s.steps))
    report = first.reports[-1] if first.reports else None
    predicted = getattr(report, "predicted_peak_bytes", None)
    return {
        **label,
        "measured_peak": memory.peak_bytes,
        "predicted_peak": predicted,
        "error": None if predicted is None else predicted / memory.peak_bytes - 1,
        "grad_diff": training.relative_grad_diff(first.grads, eager),
        "step_s": median,
        "step_iqr_s": iqr,
        "first_step_s": first.seconds,
        "seconds": time.perf_counter() - started,
        "graphs": len(first.reports),
        "notes": list(getattr(report, "notes", ())),
    }


def _fresh(base: nn.Module) -> nn.Module:
    """A copy of ``base`` to compile, with Dynamo's state and the device's cache freed."""
    torch.compiler.reset()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return copy.deepcopy(base)


def peak_exactness(name: str, s: Settings, rows: Rows) -> None:
    """1. Ours at budgets 1 and 0, a cap midway between their predicted peaks, then 0.5."""
    base, _ = hf_model(name, s)
    inputs = training.token_inputs(s, s.device)
    _, eager = training.eager_step(base, inputs, STEP_SEED)
    predicted: dict[float, int] = {}
    for budget in (1.0, 0.0, "cap", 0.5):
        if budget == "cap":
            if len(predicted) < 2:
                continue
            options: dict[str, object] = {"peak_memory_bytes": (predicted[0.0] + predicted[1.0]) // 2}
        else:
            options = {"memory_budget": budget}
        model = _fresh(base)
        fn = torch.compile(model, backend=ours(s, **options))
        label = {"model": name, "system": "recompute", **options}
        row = rows.add(measure_system(label, model, fn, inputs, eager, s))
        if budget != "cap" and row["predicted_peak"] is not None:
            predicted[budget] = row["predicted_peak"]  # type: ignore[assignment]


def alternatives(s: Settings, rows: Rows) -> None:
    """2. On the HF Llama: ours at 0.5, then what a user would pick instead, each with its
    peak and step time as a ratio to ours."""
    name = "hf_llama"
    base, blocks = hf_model(name, s)
    inputs = training.token_inputs(s, s.device)
    _, eager = training.eager_step(base, inputs, STEP_SEED)
    mine: Row | None = None
    systems: list[tuple[str, float | None, Callable[[nn.Module], Callable[..., torch.Tensor]]]] = [
        ("recompute", 0.5, lambda m: torch.compile(m, backend=ours(s, memory_budget=0.5))),
        ("compile", None, lambda m: torch.compile(m, backend=pytorch(s, None))),
        ("compile_budget", 0.5, lambda m: torch.compile(m, backend=pytorch(s, 0.5))),
        ("checkpoint", None, lambda m: _checkpointed(m, blocks)),
    ]
    for system, budget, make in systems:
        model = _fresh(base)
        label = {"model": name, "system": system, "budget": budget}
        row = measure_system(label, model, make(model), inputs, eager, s)
        mine = mine or row
        row["peak_x_ours"] = row["measured_peak"] / mine["measured_peak"]  # type: ignore[operator]
        row["step_x_ours"] = row["step_s"] / mine["step_s"]  # type: ignore[operator]
        rows.add(row)


def _checkpointed(model: nn.Module, blocks: Callable[[nn.Module], list[nn.Module]]) -> nn.Module:
    """Eager, with non-reentrant ``torch.utils.checkpoint`` around each block."""
    checkpoint_blocks(blocks(model))
    return model


def offload(s: Settings, rows: Rows, seconds: float) -> None:
    """3. The offload benchmark (docs/offload.md) at budget 0.5 (``benchmarks.frontier``'s systems and
    measurement): recompute with offload, recompute alone capped at the peak the offload plan
    measured, and the recompute-only plan at 0.5."""
    configs = plan_configs(
        ["llama"],
        ["recompute_peak", "recompute_offload", "recompute_peak_at_offload"],
        [0.5],
        path=s.path,
        device=s.device,
        size=s.zoo_size,
        repeats=s.steps,
    )
    # Each configuration in this process, one after the other (the phase is a process of
    # its own; ``measure_config`` resets Dynamo's state between them).
    execute(Plan(tuple(configs), 1, seconds), {}, lambda r: rows.add(r.to_dict()), lambda c, _: record_of(c))


def longest(s: Settings, rows: Rows) -> None:
    """4. ``fit_longest`` under a cap, then torch.compile and per-block checkpointing under
    the same cap (``benchmarks.longest_sequence``'s measured bisection)."""
    systems = ("ours", "checkpoint", "compile")
    args = argparse.Namespace(**s.longest, path=s.path, device=s.device, repeats=s.steps, rng="eager")
    args.systems = systems
    grid = list(range(-(-args.low // args.multiple) * args.multiple, args.high + 1, args.multiple))
    for system in args.systems:
        result = longest_sequence.run_system(system, args, args.cap, grid)
        rows.add({"cap": args.cap, **dataclasses.asdict(result)})


def rng(s: Settings, rows: Rows) -> None:
    """5. nanoGPT (dropout 0.1) at budget 0: every dropout draw is recomputed by replaying
    the generator's state (Philox seed and offset on CUDA). Gradients against eager from
    the same seed; PyTorch's budget partitioner at 0 beside it."""
    device = torch.device(s.device)
    case = bench_cases(s.zoo_size)["gpt"]
    base, inputs = training.build(case, SEED, device)
    _, eager = training.eager_step(base, inputs, STEP_SEED)
    for system, backend in (("recompute", ours(s, memory_budget=0.0)), ("compile_budget", pytorch(s, 0.0))):
        model = _fresh(base)
        label = {"model": "gpt", "system": system, "budget": 0.0}
        row = measure_system(label, model, torch.compile(model, backend=backend), inputs, eager, s)
        rows.add({**row, "grads_ok": row["grad_diff"] <= GRAD_TOLERANCE})


PHASES: dict[str, Callable[[Settings, Rows, float], None]] = {
    "peak_llama": lambda s, rows, seconds: peak_exactness("hf_llama", s, rows),
    "peak_gpt2": lambda s, rows, seconds: peak_exactness("hf_gpt2", s, rows),
    "alternatives": lambda s, rows, seconds: alternatives(s, rows),
    "offload": offload,
    "longest": lambda s, rows, seconds: longest(s, rows),
    "rng": lambda s, rows, seconds: rng(s, rows),
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu.phases", description=__doc__)
    parser.add_argument("phase", choices=list(PHASES))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--seconds", type=float, default=600.0, help="the phase's time limit")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = Rows(args.out / f"{args.phase}.json")
    rows.path.write_text("[]")
    # Compiled dropout draws eager's masks (so gradients compare). Inductor's caches stay on:
    # every configuration is a compile key of its own, so each still partitions, and a
    # kernel compiled once is not compiled again.
    with ti.inductor_config.patch(fallback_random=True):
        PHASES[args.phase](DRY_RUN if args.dry_run else GPU, rows, args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
