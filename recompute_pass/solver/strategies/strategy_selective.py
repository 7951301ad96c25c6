"""Fixed policy: save matmul, convolution and attention outputs, recompute the rest.

This is Megatron-LM's selective recomputation generalised, and torchtitan's op save-list:
the expensive ops are never repeated, the cheap memory-hungry ones always are.
"""

from __future__ import annotations

from recompute_pass.solver.frontier import Relaxation
from recompute_pass.solver.strategies.base import Solution
from recompute_pass.solver.strategies.fixed import solve_policy


class SelectiveStrategy:
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
