"""Fast strategy: Lagrangian relaxation of the budget, each step an exact min cut.

Two hull vertices straddling the budget give the next price to try (``frontier``); when
that price finds no vertex between them, the two are adjacent and the feasible one is the
answer. It is optimal when the budget falls on a hull vertex and a few percent off
otherwise; the MILP closes the gap.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from recompute_pass.solver.frontier import Relaxation
from recompute_pass.solver.problem import Plan
from recompute_pass.solver.strategies.base import Solution

log = logging.getLogger(__name__)

_MAX_STEPS = 64


@dataclass(frozen=True)
class Bracket:
    """The cheapest hull plan within the budget, and the next hull plan beyond it."""

    feasible: Plan
    beyond: Plan | None  # None when the unbudgeted optimum already fits
    steps: int  # min-cut solves, counting the relaxation's ends it looked at
    timed_out: bool = False  # the time limit stopped the search before low and high met


def bracket(relaxation: Relaxation, budget: float, *, time_limit: float = float("inf")) -> Bracket:
    problem = relaxation.problem
    low = relaxation.cheapest  # the most bytes
    if low.size(problem) <= budget:
        return Bracket(low, None, 1)
    high = relaxation.smallest  # the fewest bytes
    if high.size(problem) > budget:
        return Bracket(high, None, 2)
    deadline = time.monotonic() + time_limit
    steps = 2
    while steps < _MAX_STEPS:  # invariant: high fits the budget, low does not
        if time.monotonic() >= deadline:
            return Bracket(high, low, steps, timed_out=True)
        middle = relaxation.between(high, low)
        steps += 1
        if middle is None:
            break  # no hull vertex between: low and high are adjacent
        if middle.size(problem) <= budget:
            high = middle
        else:
            low = middle
    return Bracket(high, low, steps)


class MinCutStrategy:
    name = "mincut"
    honours_budget = True

    def solve(self, relaxation: Relaxation, budget: float, *, time_limit: float) -> Solution:
        result = bracket(relaxation, budget, time_limit=time_limit)
        fits = result.feasible.size(relaxation.problem) <= budget
        notes = [f"{result.steps} min-cut solves"]
        if result.timed_out:
            log.warning(
                "recompute_pass: min-cut search stopped by the time limit after %d solves; "
                "using the best plan found",
                result.steps,
            )
            notes.append("time limit")
        if not fits:
            notes.append("budget below the fewest bytes any plan saves")
        return Solution(result.feasible, optimal=result.beyond is None and fits, notes=tuple(notes))
