"""Fixed policy: recompute every forward value that can be recomputed (full checkpointing).

Only what cannot be rebuilt crosses to backward: inputs, random draws, must-save values.
"""

from __future__ import annotations

from recompute_pass.solver.frontier import Relaxation
from recompute_pass.solver.strategies.base import Solution
from recompute_pass.solver.strategies.fixed import solve_policy


class RecomputeAllStrategy:
    name = "recompute_all"
    honours_budget = False

    def solve(self, relaxation: Relaxation, budget: float, *, time_limit: float) -> Solution:
        problem = relaxation.problem
        everything = set(range(len(problem)))
        forward = {i for i, it in enumerate(problem.items) if it.is_forward}
        return solve_policy(problem, everything, forward, self.name)
