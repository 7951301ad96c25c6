"""Fixed policy: Chen et al.'s sqrt(N) checkpointing (arXiv:1604.06174), on any graph.

The forward is cut, in graph order, into about sqrt(N) segments of equal activation
bytes (N: the forward values that hold memory). Only values that cross into a later
segment may be saved; everything inside a segment is recomputed from them in backward,
one segment at a time, so memory is about sqrt(N) boundaries plus one segment's values.
"""

from __future__ import annotations

import math

from recompute_pass.solver.frontier import Relaxation
from recompute_pass.solver.problem import Problem
from recompute_pass.solver.strategies.base import Solution
from recompute_pass.solver.strategies.fixed import solve_policy


def segments(problem: Problem, count: int | None = None) -> list[int]:
    """Each item's segment among ``count`` (default: sqrt(N)): items are in graph order; a
    new segment starts when the activation bytes so far pass the next multiple of
    total / count."""
    items = problem.items
    sizes = [it.size if it.is_forward and it.can_save else 0 for it in items]
    if count is None:
        count = max(1, round(math.sqrt(sum(size > 0 for size in sizes))))
    total = sum(sizes) or 1
    result, before = [], 0
    for size in sizes:
        result.append(min(count - 1, before * count // total))
        before += size
    return result


def segment_policy(problem: Problem, count: int | None = None) -> tuple[set[int], set[int]]:
    """(may recompute, must not save): everything may be recomputed; of the forward values,
    only those crossing into a later segment may be saved."""
    segment = segments(problem, count)
    crossing = {j for i, it in enumerate(problem.items) for j in it.inputs if segment[j] < segment[i]}
    forward = {i for i, it in enumerate(problem.items) if it.is_forward}
    return set(range(len(problem))), forward - crossing


class SqrtNStrategy:
    name = "sqrt_n"
    honours_budget = False

    def solve(self, relaxation: Relaxation, budget: float, *, time_limit: float) -> Solution:
        problem = relaxation.problem
        return solve_policy(problem, *segment_policy(problem), self.name)
