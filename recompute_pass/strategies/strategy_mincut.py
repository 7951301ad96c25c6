"""Fast strategy: Lagrangian relaxation of the budget, each step an exact min cut.

Pricing saved bytes at ``price`` seconds per byte turns the budgeted problem into an
unbudgeted one (``cut.CutGraph``). Its optimal plans, over all prices, are the vertices of
the lower convex hull of the (bytes, cost) frontier. Two hull vertices straddling the
budget give the next price to try (the slope between them); when that price finds no
cheaper plan, the two are adjacent and the feasible one is the answer. It is optimal when
the budget falls on a hull vertex and a few percent off otherwise; the MILP closes the gap.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass

from recompute_pass.problem import Plan, Problem
from recompute_pass.strategies.base import Solution
from recompute_pass.strategies.cut import CutGraph, check_feasible

log = logging.getLogger(__name__)

_MAX_STEPS = 64


def _below_line(problem: Problem, plan: Plan, on_line: Plan, price: float) -> bool:
    """Whether ``plan`` beats ``on_line`` at ``price``: a hull vertex lies between."""
    line = on_line.cost(problem) + price * on_line.size(problem)
    value = plan.cost(problem) + price * plan.size(problem)
    return value < line - 1e-9 * abs(line)


@dataclass(frozen=True)
class Bracket:
    """The cheapest hull plan within the budget, and the next hull plan beyond it."""

    feasible: Plan
    beyond: Plan | None  # None when the unbudgeted optimum already fits
    steps: int
    timed_out: bool = False  # the time limit stopped the search before low and high met


def dominant_price(problem: Problem) -> float:
    """A price per byte at which one byte outweighs every time cost: the min-bytes plan."""
    total = sum(it.save_cost + it.recompute_cost for it in problem.items)
    return 2.0 * total + 1.0


def bracket(problem: Problem, budget: float, *, time_limit: float = float("inf")) -> Bracket:
    check_feasible(problem)
    graph = CutGraph.build(problem)
    low = graph.solve(problem, 0.0)  # cheapest plan, most bytes
    if low.size(problem) <= budget:
        return Bracket(low, None, 1)
    high = graph.solve(problem, dominant_price(problem))  # fewest bytes
    if high.size(problem) > budget:
        return Bracket(high, None, 2)
    deadline = time.monotonic() + time_limit
    steps = 2
    while steps < _MAX_STEPS:
        if time.monotonic() >= deadline:
            return Bracket(high, low, steps, timed_out=True)
        low_size, high_size = low.size(problem), high.size(problem)
        low_cost, high_cost = low.cost(problem), high.cost(problem)
        if low_size <= high_size:
            break
        price = max(high_cost - low_cost, 0.0) / (low_size - high_size)
        middle = graph.solve(problem, price)
        steps += 1
        if middle in (low, high) or not _below_line(problem, middle, low, price):
            break  # no hull vertex between: low and high are adjacent
        if middle.size(problem) <= budget:
            high = middle
        else:
            low = middle
    return Bracket(high, low, steps)


class MinCutStrategy:
    name = "mincut"
    honours_budget = True

    def solve(self, problem: Problem, budget: float, *, time_limit: float) -> Solution:
        result = bracket(problem, budget, time_limit=time_limit)
        fits = result.feasible.size(problem) <= budget
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


def hull(problem: Problem, *, max_solves: int = 32) -> tuple[Plan, ...]:
    """Vertices of the lower convex hull of the (bytes, cost) frontier, fewest bytes first.

    Each vertex is the optimum at some price; between two known vertices the slope gives
    the price at which a vertex in between, if any, wins (Eisner-Severance). Stops after
    ``max_solves`` min cuts, leaving the hull coarser but every point on it exact.
    """
    check_feasible(problem)
    graph = CutGraph.build(problem)
    cheapest = graph.solve(problem, 0.0)
    smallest = graph.solve(problem, dominant_price(problem))
    solves = 2
    vertices = {smallest, cheapest}
    pending = deque([(smallest, cheapest)])  # breadth first: a capped hull is evenly coarse
    while pending and solves < max_solves:
        small, big = pending.popleft()
        small_size, big_size = small.size(problem), big.size(problem)
        if big_size <= small_size:
            continue
        price = max(small.cost(problem) - big.cost(problem), 0.0) / (big_size - small_size)
        middle = graph.solve(problem, price)
        solves += 1
        if middle in vertices or not _below_line(problem, middle, big, price):
            continue
        vertices.add(middle)
        pending += [(small, middle), (middle, big)]
    return tuple(sorted(vertices, key=lambda p: (p.size(problem), p.cost(problem))))
