"""Fixed policy: save matmul, convolution and attention outputs, recompute the rest.

This is Megatron-LM's selective recomputation generalised, and torchtitan's op save-list:
the expensive ops are never repeated, the cheap memory-hungry ones always are.
"""

from __future__ import annotations

from recompute_pass.problem import Problem
from recompute_pass.strategies.base import Solution
from recompute_pass.strategies.fixed import solve_policy

# ``cost_model.MATRIX_KINDS`` as values: strategies stay free of torch (a test keeps them equal).
COMPUTE_INTENSIVE = frozenset({"gemm", "conv", "attention"})


class SelectiveStrategy:
    name = "selective"
    honours_budget = False

    def solve(self, problem: Problem, budget: float, *, time_limit: float) -> Solution:
        items = problem.items
        expensive = {i for i, it in enumerate(items) if it.kind in COMPUTE_INTENSIVE}
        # The tensors of a multi-output attention op (its getitems) carry their parent's class.
        expensive |= {
            i
            for i, it in enumerate(items)
            if it.can_save and it.inputs and it.recompute_cost == 0.0 and set(it.inputs) <= expensive
        }
        cheap = set(range(len(items))) - expensive
        forward = {i for i, it in enumerate(items) if it.is_forward}
        return solve_policy(problem, cheap, forward - expensive, self.name)
