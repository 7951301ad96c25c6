"""How long a sequence fits a memory cap, per system: measured, and ``fit_longest``'s answer.

    python -m benchmarks.longest_sequence --model llama --cap 256MiB [--cap 64MiB ...]
        [--low 64] [--high 4096] [--multiple 16] [--repeats 3] [--layers N] [--path inductor|graphs]
        [--device cpu|cuda]
        [--systems compile checkpoint budget_0 budget_0.5 ours] [--rng eager|inductor]
        [--out benchmarks/longest_sequence/results]

For every system the longest sequence whose measured peak fits the cap is found by
measured bisection on multiples of ``--multiple`` (galloping up from ``--low``, so no step
runs far beyond the boundary), and the step time is measured there. Each compiled system
is compiled once, ``dynamic=True``, and run at every length. Ours is ``fit_longest``'s
answer (one trace, no step run), then checked: its plan's measured boundary, its peak at
the fitted length, and its gradients against eager there. The peak is the one definition
(README, "The peak"), measured with the profiler's allocation events on CPU and with
``max_memory_allocated`` on CUDA (``--device cuda``).

Random ops draw as in eager (``--rng eager``, the default: Inductor's ``fallback_random``),
so gradients compare with eager. ``--rng inductor`` keeps Inductor's own RNG, what a user
of ``torch.compile`` runs: dropout is then a fused in-kernel draw from a saved seed, with
other plans and peaks, and ours' gradients compare with ``torch.compile``'s under the same
seeds (results named ``..._inductor-rng``).

Results (one JSON per model and cap, the table and plots) go to ``--out``, whose
``RESULTS.md`` is rebuilt from every JSON there (``benchmarks.longest_sequence.longest_report``).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from benchmarks.harness.cases import SHAPES, Shape
from benchmarks.harness.checkpoint_flops import checkpoint_blocks
from benchmarks.harness.meters import step_memory
from benchmarks.harness.models import GPT, GPTConfig, Llama, LlamaConfig
from benchmarks.harness.partition_stats import BudgetedMinCut, RecordingPartitioner
from benchmarks.harness.study import command, progress
from benchmarks.harness.study import parser as make_parser
from benchmarks.harness.systems import make_backend
from benchmarks.harness.training import Steps, grads_of, relative_grad_diff
from benchmarks.longest_sequence.longest_report import LABELS, write_report
from recompute_pass import fit_longest, recompute_backend, recompute_eager_backend
from recompute_pass import torch_internals as ti

SYSTEMS = ("compile", "checkpoint", "budget_0", "budget_0.5", "ours")
RESULTS = Path("benchmarks/longest_sequence/results")
_UNITS = {
    "": 1,
    "B": 1,
    "KIB": 1 << 10,
    "MIB": 1 << 20,
    "GIB": 1 << 30,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
}


def parse_bytes(text: str) -> int:
    """``"256MiB"``, ``"1.5GiB"``, ``"300MB"`` or a plain number of bytes."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", text)
    if match is None or match.group(2).upper() not in _UNITS:
        raise argparse.ArgumentTypeError(f"not a size in bytes: {text!r} (e.g. 256MiB)")
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


def build_model(name: str, shape: Shape, max_seq: int, device: str = "cpu") -> nn.Module:
    """The zoo's model at ``shape``, able to run sequences up to ``max_seq``."""
    torch.manual_seed(0)
    if name == "llama":
        cfg = LlamaConfig(shape.vocab, max_seq, shape.dim, shape.heads, shape.hidden, shape.layers)
        return Llama(cfg).to(device)
    return GPT(GPTConfig(shape.vocab, max_seq, shape.dim, shape.heads, shape.layers, dropout=0.1)).to(device)


def token_inputs(shape: Shape, device: str = "cpu") -> Callable[[int], tuple[torch.Tensor, torch.Tensor]]:
    def make(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(n)
        size = (shape.batch, n)
        return (
            torch.randint(0, shape.vocab, size, generator=generator).to(device),
            torch.randint(0, shape.vocab, size, generator=generator).to(device),
        )

    return make


@dataclass
class SystemResult:
    system: str
    longest: int | None  # None: not even --low fits
    beyond_high: bool  # --high itself fits: the boundary is further
    peaks: dict[int, int] = field(default_factory=dict)  # length -> measured peak
    step_seconds: list[float] = field(default_factory=list)  # at ``longest``
    compile_seconds: float = 0.0
    # ours only
    predicted: int | None = None
    predicted_peak: int | None = None
    predicted_overhead: float | None = None
    probes: dict[int, int] = field(default_factory=dict)  # length -> lowest predicted peak
    fit_seconds: float | None = None
    measured_at_predicted: int | None = None
    grad_diff: float | None = None
    summary: str = ""


class Runner:
    """One compiled (or eager) step function, run at any length."""

    def __init__(self, model: nn.Module, step: Callable[..., torch.Tensor], make_inputs: Callable) -> None:
        self.model, self.step, self.make_inputs = model, step, make_inputs
        self.device = next(model.parameters()).device

    def peak(self, n: int) -> int:
        args = self.make_inputs(n)
        self.model.zero_grad(set_to_none=True)
        torch.manual_seed(0)
        memory, _ = step_memory(lambda: self.step(*args), lambda loss: loss.backward(), self.device)
        return memory.peak_bytes

    def times(self, n: int, repeats: int) -> list[float]:
        args = self.make_inputs(n)
        self.step(*args).backward()  # warm-up: the first step at a new length is slower
        return Steps(self.model, self.step, args, 0, self.device).timed(repeats)

    def grads(self, n: int) -> dict[str, torch.Tensor]:
        self.model.zero_grad(set_to_none=True)
        torch.manual_seed(0)
        self.step(*self.make_inputs(n)).backward()
        return grads_of(self.model)


def measured_boundary(
    peak: Callable[[int], int], grid: list[int], cap: int, peaks: dict[int, int], start: int | None = None
) -> tuple[int | None, bool]:
    """The largest length of ``grid`` whose measured peak fits ``cap``, assuming a fixed
    plan's peak grows with the length: gallop up from ``start`` (else the first length),
    doubling the step, then bisect. Returns (length or None, whether the last fits)."""

    def fits(i: int) -> bool:
        if grid[i] not in peaks:
            peaks[grid[i]] = peak(grid[i])
            progress(f"    n={grid[i]}: peak {peaks[grid[i]] / 2**20:.2f} MiB")
        return peaks[grid[i]] <= cap

    lo = grid.index(start) if start in grid else 0
    if not fits(lo):
        if lo == 0:
            return None, False
        hi, lo = lo, 0
        if not fits(0):
            return None, False
    else:
        step, hi = 1, None
        while hi is None:
            nxt = min(lo + step, len(grid) - 1)
            if nxt == lo:
                return grid[lo], True
            if fits(nxt):
                lo, step = nxt, step * 2
            else:
                hi = nxt
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return grid[lo], False


def run_system(system: str, args: argparse.Namespace, cap: int, grid: list[int]) -> SystemResult:
    shape = _shape(args)
    make_inputs = token_inputs(shape, args.device)
    model = build_model(args.model, shape, grid[-1], args.device)
    torch.compiler.reset()
    result = SystemResult(system, None, False)
    start_at = None
    if system == "checkpoint":
        checkpoint_blocks(list(model.blocks))  # type: ignore[arg-type]
        runner = Runner(model, model, make_inputs)
    elif system == "ours":
        backend = recompute_backend if args.path == "inductor" else recompute_eager_backend
        start = time.perf_counter()
        fit = fit_longest(
            copy.deepcopy(model),
            make_inputs,
            cap,
            low=grid[0],
            high=grid[-1],
            multiple_of=args.multiple,
            backend=backend,
        )
        result.fit_seconds = time.perf_counter() - start
        result.predicted, result.predicted_peak = fit.size, fit.predicted_peak_bytes
        result.predicted_overhead, result.summary = fit.estimated_overhead_seconds, fit.summary
        result.probes = {p.size: p.lowest_peak_bytes for p in fit.probes}
        progress(f"  fit_longest: {fit} ({result.fit_seconds:.0f} s)")
        runner = Runner(model, torch.compile(model, backend=fit.backend, dynamic=True), make_inputs)
        start_at = fit.size
    else:
        budget = {"compile": None, "budget_0": 0.0, "budget_0.5": 0.5}[system]
        backend = make_backend(RecordingPartitioner(BudgetedMinCut(budget)), args.path)
        runner = Runner(model, torch.compile(model, backend=backend, dynamic=True), make_inputs)
    start = time.perf_counter()
    first = start_at or grid[min(len(grid) - 1, len(grid) // 8)]
    result.peaks[first] = runner.peak(first)  # compiles (dynamic=True: once for every length)
    result.compile_seconds = time.perf_counter() - start
    progress(f"    n={first}: peak {result.peaks[first] / 2**20:.2f} MiB (compile and first step)")
    peaks = result.peaks
    result.longest, result.beyond_high = measured_boundary(runner.peak, grid, cap, peaks, start_at or first)
    if result.longest is not None:
        result.step_seconds = runner.times(result.longest, args.repeats)
    if system == "ours" and result.predicted is not None:
        result.measured_at_predicted = result.peaks.get(result.predicted) or runner.peak(result.predicted)
        result.grad_diff = _grad_diff(runner, args, result.predicted, shape)
    return result


def _shape(args: argparse.Namespace) -> Shape:
    """``--size``'s shape, with ``--batch`` and ``--layers`` where given."""
    shape = SHAPES[args.size]
    return dataclasses.replace(shape, batch=args.batch or shape.batch, layers=args.layers or shape.layers)


def _grad_diff(runner: Runner, args: argparse.Namespace, n: int, shape: Shape) -> float:
    """Max |ours - reference| gradient over the largest reference gradient, at length
    ``n``. The reference: eager, or under ``--rng inductor`` ``torch.compile`` (the same
    Inductor draws from the same seeds)."""
    actual = runner.grads(n)
    model = build_model(args.model, shape, runner.model.cfg.seq, args.device)
    step = model if args.rng == "eager" else torch.compile(model, dynamic=True)
    return relative_grad_diff(actual, Runner(model, step, runner.make_inputs).grads(n))


def _merged(old: dict, new: dict) -> dict:
    """``new``'s systems replace ``old``'s; both commands are recorded."""
    ran = {r["system"] for r in new["results"]}
    results = [r for r in old["results"] if r["system"] not in ran] + new["results"]
    results.sort(key=lambda r: SYSTEMS.index(r["system"]))
    command = (
        new["command"] if old["command"] == new["command"] else f"{old['command']}; then {new['command']}"
    )
    wall = old["wall_seconds"] + new["wall_seconds"]
    return {**new, "command": command, "wall_seconds": wall, "results": results}


def main(argv: list[str] | None = None) -> int:
    parser = make_parser("benchmarks.longest_sequence", __doc__, out=RESULTS)
    parser.add_argument("--model", choices=("llama", "gpt"), required=True)
    parser.add_argument(
        "--cap", type=parse_bytes, action="append", required=True, help="e.g. 256MiB; repeatable"
    )
    parser.add_argument("--low", type=int, default=64)
    parser.add_argument("--high", type=int, default=4096)
    parser.add_argument("--multiple", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3, help="timed steps at each system's longest length")
    parser.add_argument(
        "--size", choices=tuple(SHAPES), default="full", help="model width (benchmarks.harness.cases)"
    )
    parser.add_argument("--batch", type=int, default=None, help="default: the size's batch")
    parser.add_argument("--layers", type=int, default=None, help="default: the size's layers")
    parser.add_argument("--path", choices=("inductor", "graphs"), default="inductor")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="CUDA: max_memory_allocated")
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument(
        "--rng", choices=("eager", "inductor"), default="eager", help="whose random draws (see above)"
    )
    args = parser.parse_args(argv)
    grid = list(range(-(-args.low // args.multiple) * args.multiple, args.high + 1, args.multiple))
    run = command("benchmarks.longest_sequence", argv)
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(torch.get_num_threads())
    variant = args.path if args.rng == "eager" else f"{args.path}-rng"
    with ti.inductor_config.patch(force_disable_caches=True, fallback_random=args.rng == "eager"):
        for cap in args.cap:
            started = time.perf_counter()
            progress(f"{args.model} at cap {cap / 2**20:.1f} MiB, lengths {grid[0]}..{grid[-1]}")
            results = []
            for system in args.systems:
                progress(f"  {LABELS[system]}")
                t0 = time.perf_counter()
                result = run_system(system, args, cap, grid)
                results.append(result)
                progress(
                    f"  -> longest {result.longest}{'+' if result.beyond_high else ''}, "
                    f"{time.perf_counter() - t0:.0f} s"
                )
            record = {
                "model": args.model,
                "cap": cap,
                "command": run,
                "path": variant,
                "rng": args.rng,
                "size": args.size,
                "batch": _shape(args).batch,
                "layers": _shape(args).layers,
                "grid": [grid[0], grid[-1], args.multiple],
                "wall_seconds": time.perf_counter() - started,
                "torch": torch.__version__,
                "results": [dataclasses.asdict(r) for r in results],
            }
            path = args.out / f"{args.model}_{cap >> 20}MiB_{variant}.json"
            if path.exists():  # a rerun of some systems: keep the others' results
                record = _merged(json.loads(path.read_text()), record)
            path.write_text(json.dumps(record, indent=1))
    progress(f"wrote {write_report(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
