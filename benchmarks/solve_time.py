"""Partitioner wall time on a 12-layer nanoGPT joint graph: ours against PyTorch's.

Graph size, not width, drives solve time, so the model is narrow (dim 64, seq 32) and the
graphs run without codegen. Ours: ``PartitionReport.solve_seconds`` (budget range + solver)
and the whole partitioner call (with extraction); PyTorch: its partitioner call with
``activation_memory_budget`` at the same ratio. One process, caches off:
``python -m benchmarks.solve_time OUT_JSON [LAYERS [quick]]`` (quick: budget 0.5 only).
"""

from __future__ import annotations

import copy
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from benchmarks.models import GPT, GPTConfig
from benchmarks.partition_stats import BudgetedMinCut, RecordingPartitioner
from benchmarks.systems import make_backend
from benchmarks.worker import benchmark_settings
from recompute_pass import RecomputeOptions, RecomputePartitioner, capture_reports

BUDGETS = (0.0, 0.5, 1.0)


@dataclass(frozen=True)
class SolveTime:
    layers: int
    budget: float
    joint_nodes: int
    candidates_saved: int  # tensors our plan saves
    solve_seconds: float  # ours: budget range + solver (PartitionReport.solve_seconds)
    partition_seconds: float  # ours: the whole partitioner call
    optimal: bool
    pytorch_partition_seconds: float  # PyTorch's min-cut + knapsack at the same ratio


def _partition(
    model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], recorder: RecordingPartitioner
) -> None:
    torch._dynamo.reset()
    torch.compile(copy.deepcopy(model), backend=make_backend(recorder, "graphs"))(*inputs)


def measure(layers: int = 12, budgets: tuple[float, ...] = BUDGETS) -> list[SolveTime]:
    with benchmark_settings():
        return _measure(layers, budgets)


def _measure(layers: int, budgets: tuple[float, ...]) -> list[SolveTime]:
    torch.manual_seed(0)
    cfg = GPTConfig(layers=layers)
    model = GPT(cfg).train()
    inputs = (torch.randint(0, cfg.vocab, (4, cfg.seq)), torch.randint(0, cfg.vocab, (4, cfg.seq)))
    results = []
    for budget in budgets:
        ours = RecordingPartitioner(
            RecomputePartitioner(RecomputeOptions(memory_budget=budget, fallback=False))
        )
        with capture_reports() as reports:
            _partition(model, inputs, ours)
        theirs = RecordingPartitioner(BudgetedMinCut(budget))
        _partition(model, inputs, theirs)
        (report,) = reports
        stats = ours.total()
        results.append(
            SolveTime(
                layers=layers,
                budget=budget,
                joint_nodes=stats.joint_nodes,
                candidates_saved=stats.saved_tensors,
                solve_seconds=report.solve_seconds,
                partition_seconds=stats.partition_seconds,
                optimal=report.optimal,
                pytorch_partition_seconds=theirs.total().partition_seconds,
            )
        )
    return results


def main(argv: list[str]) -> int:
    layers = int(argv[1]) if len(argv) > 1 else 12
    budgets = (0.5,) if "quick" in argv[2:] else BUDGETS
    Path(argv[0]).write_text(json.dumps([asdict(r) for r in measure(layers, budgets)], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
