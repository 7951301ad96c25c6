"""The memory/cost frontier as min cuts see it: the lower convex hull of (bytes, cost).

Pricing saved bytes at ``price`` seconds per byte turns the budgeted problem into an
unbudgeted one, a min cut (``cut.CutGraph``). Its optimal plans, over all prices, are the
vertices of the hull. Between two known vertices, the slope of the line joining them is
the one price at which a vertex in between, if any, wins (Eisner-Severance): the step
that both the hull and the min-cut strategy's bracket search repeat.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from recompute_pass.solver.cut import CutGraph
from recompute_pass.solver.problem import Plan, Problem


def dominant_price(problem: Problem) -> float:
    """A price per byte at which one byte outweighs every time cost: the min-bytes plan."""
    total = sum(it.save_cost + it.recompute_cost for it in problem.items)
    return 2.0 * total + 1.0


def _below_line(problem: Problem, plan: Plan, on_line: Plan, price: float) -> bool:
    """Whether ``plan`` beats ``on_line`` at ``price``: a hull vertex lies between."""
    line = on_line.cost(problem) + price * on_line.size(problem)
    value = plan.cost(problem) + price * plan.size(problem)
    return value < line - 1e-9 * abs(line)


@dataclass(frozen=True)
class Relaxation:
    """A feasible problem with its byte budget priced instead of enforced.

    Built once per graph (``of``): the feasibility check, the cut network and the hull's
    two ends, which the frontier and the strategies then share.
    """

    problem: Problem
    graph: CutGraph
    cheapest: Plan  # price 0: the unbudgeted optimum, the most bytes on the hull
    smallest: Plan  # the dominant price: the fewest bytes any plan saves

    @staticmethod
    def of(problem: Problem) -> Relaxation:
        """Raises ``InfeasibleProblem`` when some needed value has no plan."""
        problem.check_feasible()
        graph = CutGraph.build(problem)
        cheapest = graph.solve(problem, 0.0)
        return Relaxation(problem, graph, cheapest, graph.solve(problem, dominant_price(problem)))

    def between(self, small: Plan, big: Plan) -> Plan | None:
        """The hull vertex strictly between hull plans ``small`` and ``big`` (which saves
        more bytes) that one min cut finds, or None when they are adjacent."""
        problem = self.problem
        small_size, big_size = small.size(problem), big.size(problem)
        price = max(small.cost(problem) - big.cost(problem), 0.0) / (big_size - small_size)
        middle = self.graph.solve(problem, price)
        if middle in (small, big) or not _below_line(problem, middle, big, price):
            return None
        return middle


def hull(relaxation: Relaxation, *, deadline: float = float("inf"), max_solves: int = 32) -> tuple[Plan, ...]:
    """Vertices of the lower convex hull of the (bytes, cost) frontier, fewest bytes first.

    Stops after ``max_solves`` min cuts or at ``deadline`` (``time.monotonic``), leaving
    the hull coarser but every point on it exact; both ends are always there.
    """
    problem = relaxation.problem
    smallest, cheapest = relaxation.smallest, relaxation.cheapest
    solves = 2
    vertices = {smallest, cheapest}
    pending = deque([(smallest, cheapest)])  # breadth first: a capped hull is evenly coarse
    while pending and solves < max_solves and time.monotonic() < deadline:
        small, big = pending.popleft()
        if big.size(problem) <= small.size(problem):
            continue
        middle = relaxation.between(small, big)
        solves += 1
        if middle is None or middle in vertices:
            continue
        vertices.add(middle)
        pending += [(small, middle), (middle, big)]
    return tuple(sorted(vertices, key=lambda p: (p.size(problem), p.cost(problem))))
