"""Fixed policy: recompute nothing the forward computed (what eager autograd does).

What cannot be saved is still rebuilt in backward: views of saved tensors (saving a view
would keep its base alive anyway) and the like.
"""

from __future__ import annotations

from recompute_pass.solver.frontier import Relaxation
from recompute_pass.solver.strategies.base import Solution
from recompute_pass.solver.strategies.fixed import solve_policy


class NoRecomputeStrategy:
    name = "no_recompute"
    honours_budget = False

    def solve(self, relaxation: Relaxation, budget: float, *, time_limit: float) -> Solution:
        problem = relaxation.problem
        unsavable = {i for i, it in enumerate(problem.items) if not it.is_forward or not it.can_save}
        return solve_policy(problem, unsavable, set(), self.name)
