"""The fixed policies: plans a rule chooses, not the budget, for comparison.

Each solves its restricted problem exactly (``policy.solve_policy``) and reports the budget
without enforcing it.
"""

from __future__ import annotations

from recompute_pass.solver.frontier import Relaxation
from recompute_pass.solver.strategies.base import Solution
from recompute_pass.solver.strategies.policy import solve_policy


class NoRecomputeStrategy:
    """Recompute nothing the forward computed (what eager autograd does).

    What cannot be saved is still rebuilt in backward: views of saved tensors (saving a view
    would keep its base alive anyway) and the like.
    """

    name = "no_recompute"
    honours_budget = False

    def solve(self, relaxation: Relaxation, budget: float, *, time_limit: float) -> Solution:
        problem = relaxation.problem
        unsavable = {i for i, it in enumerate(problem.items) if not it.is_forward or not it.can_save}
        return solve_policy(problem, unsavable, set(), self.name)


class RecomputeAllStrategy:
    """Recompute every forward value that can be recomputed (full checkpointing).

    Only what cannot be rebuilt crosses to backward: inputs, random draws, must-save values.
    """

    name = "recompute_all"
    honours_budget = False

    def solve(self, relaxation: Relaxation, budget: float, *, time_limit: float) -> Solution:
        problem = relaxation.problem
        everything = set(range(len(problem)))
        forward = {i for i, it in enumerate(problem.items) if it.is_forward}
        return solve_policy(problem, everything, forward, self.name)


class SelectiveStrategy:
    """Save matmul, convolution and attention outputs, recompute the rest.

    This is Megatron-LM's selective recomputation generalised, and torchtitan's op save-list:
    the expensive ops are never repeated, the cheap memory-hungry ones always are.
    """

    name = "selective"
    honours_budget = False

    def solve(self, relaxation: Relaxation, budget: float, *, time_limit: float) -> Solution:
        problem = relaxation.problem
        items = problem.items
        expensive = {i for i, it in enumerate(items) if it.is_matrix}
        # The tensors of a multi-output attention op (its getitems) carry their parent's class.
        expensive |= {
            i
            for i, it in enumerate(items)
            if it.selects_output and it.can_save and it.inputs and set(it.inputs) <= expensive
        }
        cheap = set(range(len(items))) - expensive
        forward = {i for i, it in enumerate(items) if it.is_forward}
        return solve_policy(problem, cheap, forward - expensive, self.name)
