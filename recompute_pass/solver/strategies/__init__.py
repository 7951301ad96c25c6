"""Interchangeable solvers for the save-or-recompute problem, by name."""

from __future__ import annotations

from recompute_pass.solver.problem import InfeasibleProblem
from recompute_pass.solver.strategies.base import Solution, Strategy
from recompute_pass.solver.strategies.strategy_fixed import (
    NoRecomputeStrategy,
    RecomputeAllStrategy,
    SelectiveStrategy,
)
from recompute_pass.solver.strategies.strategy_milp import MILPStrategy
from recompute_pass.solver.strategies.strategy_mincut import MinCutStrategy
from recompute_pass.solver.strategies.strategy_sqrt_n import SqrtNStrategy

STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        MILPStrategy(),
        MinCutStrategy(),
        NoRecomputeStrategy(),
        RecomputeAllStrategy(),
        SelectiveStrategy(),
        SqrtNStrategy(),
    )
}

__all__ = ["STRATEGIES", "InfeasibleProblem", "Solution", "Strategy"]
