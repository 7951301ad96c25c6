"""Partitioner wall time on a 12-layer nanoGPT joint graph: ours against PyTorch's.

Graph size, not width, drives solve time, so the model is narrow (dim 64, seq 32) and the
graphs run without codegen. Ours: ``PartitionReport.solve_seconds`` (budget range + solver)
and the whole partitioner call (with extraction); PyTorch: its partitioner call with
``activation_memory_budget`` at the same ratio. One process, caches off:

    python -m benchmarks.solve_time [--layers 12] [--quick] [--out benchmarks/solve_time/results]

(``--quick``: budget 0.5 only). Writes ``<out>/solve_time.json`` and ``<out>/RESULTS.md``;
``benchmarks.frontier`` runs it after its configurations (``--solve-time-layers``).
"""

from __future__ import annotations

import argparse
import copy
from dataclasses import asdict, dataclass

import torch

from benchmarks.harness.models import GPT, GPTConfig
from benchmarks.harness.partition_stats import BudgetedMinCut, RecordingPartitioner
from benchmarks.harness.study import Row, Study
from benchmarks.harness.systems import make_backend
from benchmarks.harness.tables import solve_time_table
from benchmarks.harness.training import benchmark_settings
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


def solve_times(layers: int = 12, budgets: tuple[float, ...] = BUDGETS) -> list[SolveTime]:
    with benchmark_settings():
        return _solve_times(layers, budgets)


def _solve_times(layers: int, budgets: tuple[float, ...]) -> list[SolveTime]:
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


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--quick", action="store_true", help="budget 0.5 only")


def _measure(args: argparse.Namespace) -> list[Row]:
    return [asdict(r) for r in solve_times(args.layers, (0.5,) if args.quick else BUDGETS)]


STUDY = Study("benchmarks.solve_time", __doc__, _arguments, _measure, solve_time_table)
main = STUDY.main
