"""Exact strategy: the budgeted problem as a MILP, solved by HiGHS (``scipy.optimize.milp``).

Variables per relevant item: ``a`` (available in backward) and ``r`` (recomputed); saved
is ``a - r``. Every row but the budget is a difference constraint, so the LP relaxation is
nearly integral and branch-and-bound is short. The Lagrangian bracket (``strategy_mincut``)
runs first: its feasible plan is the incumbent (passed to HiGHS as an objective cutoff,
scipy's interface having no MIP start) and the answer if HiGHS is stopped by the time limit
without a better one.
"""

from __future__ import annotations

import logging
import time

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array

from recompute_pass.problem import Plan, Problem
from recompute_pass.strategies.base import Solution
from recompute_pass.strategies.strategy_mincut import bracket

log = logging.getLogger(__name__)

_GAP = 1e-6
_STATUS_OPTIMAL = 0


def _relevant(problem: Problem) -> list[int]:
    """Items a needed value can depend on; the rest are never saved or recomputed."""
    seen: set[int] = set()
    stack = sorted(problem.needed)
    while stack:
        i = stack.pop()
        if i not in seen:
            seen.add(i)
            stack += problem.items[i].inputs
    return sorted(seen)


class MILPStrategy:
    name = "milp"
    honours_budget = True

    def solve(self, problem: Problem, budget: float, *, time_limit: float) -> Solution:
        start = time.monotonic()
        warm = bracket(problem, budget, time_limit=time_limit / 4)
        incumbent = warm.feasible
        if warm.beyond is None:
            # The unbudgeted optimum fits, or nothing fits: nothing left to optimise.
            fits = incumbent.size(problem) <= budget
            notes = ("unbudgeted optimum fits the budget",) if fits else ("budget below minimum",)
            return Solution(incumbent, optimal=fits, notes=notes)
        remaining = max(time_limit - (time.monotonic() - start), 0.05)
        plan, optimal, status = self._milp(problem, budget, incumbent, remaining)
        if status == "infeasible":
            # The incumbent satisfies every row, so this is HiGHS's tolerances speaking,
            # not a property of the problem: keep the min-cut plan, claim nothing more.
            log.debug("recompute_pass: MILP reported infeasible; keeping the min-cut plan")
            return Solution(incumbent, optimal=False, notes=("MILP infeasible (numerics); min-cut plan",))
        if plan is None or plan.cost(problem) > incumbent.cost(problem):
            log.warning(
                "recompute_pass: MILP stopped (%s) after %.1fs without beating the min-cut plan; using it",
                status,
                time.monotonic() - start,
            )
            return Solution(incumbent, optimal=False, notes=(f"MILP {status}; min-cut plan",))
        if not optimal:  # the time limit: a better plan than min-cut's, but not proven optimal
            log.warning(
                "recompute_pass: MILP stopped (%s) after %.1fs; using its best plan, not proven optimal",
                status,
                time.monotonic() - start,
            )
        return Solution(plan, optimal=optimal, notes=(f"MILP {status}",))

    def _milp(
        self, problem: Problem, budget: float, incumbent: Plan, time_limit: float
    ) -> tuple[Plan | None, bool, str]:
        items = problem.items
        relevant = _relevant(problem)
        col = {item: k for k, item in enumerate(relevant)}
        n = len(relevant)
        # Columns: a_k at k, r_k at n + k. Normalise magnitudes for HiGHS's tolerances.
        save = np.array([items[i].save_cost for i in relevant])
        recompute = np.array([items[i].recompute_cost for i in relevant])
        size = np.array([items[i].size for i in relevant], dtype=np.float64)
        cost_scale = max(save.max(initial=0.0), recompute.max(initial=0.0), 1e-30)
        size_scale = max(size.max(initial=0.0), 1.0)
        objective = np.concatenate([save, recompute - save]) / cost_scale

        rows: list[int] = []
        cols: list[int] = []
        vals: list[float] = []
        upper: list[float] = []

        def row(entries: list[tuple[int, float]], bound: float) -> None:
            r = len(upper)
            for c, v in entries:
                rows.append(r)
                cols.append(c)
                vals.append(v)
            upper.append(bound)

        for k, i in enumerate(relevant):
            item = items[i]
            row([(n + k, 1.0), (k, -1.0)], 0.0)  # recomputed => available
            if not item.can_save:
                row([(k, 1.0), (n + k, -1.0)], 0.0)  # available => recomputed
            for j in item.inputs:
                row([(n + k, 1.0), (col[j], -1.0)], 0.0)  # recomputed => inputs available
        budget_row = [(k, s / size_scale) for k, s in enumerate(size)] + [
            (n + k, -s / size_scale) for k, s in enumerate(size)
        ]
        row(budget_row, budget / size_scale)
        cutoff = incumbent.cost(problem) / cost_scale
        row(list(enumerate(objective)), cutoff + 1e-9 * max(abs(cutoff), 1.0))

        lower_bounds = np.zeros(2 * n)
        upper_bounds = np.ones(2 * n)
        for k, i in enumerate(relevant):
            if i in problem.needed:
                lower_bounds[k] = 1.0
            if not items[i].can_recompute:
                upper_bounds[n + k] = 0.0
        matrix = coo_array((vals, (rows, cols)), shape=(len(upper), 2 * n)).tocsr()
        result = milp(
            objective,
            integrality=np.ones(2 * n),
            bounds=Bounds(lower_bounds, upper_bounds),
            constraints=LinearConstraint(matrix, -np.inf, np.asarray(upper)),
            options={"time_limit": time_limit, "mip_rel_gap": _GAP, "presolve": True},
        )
        status = {0: "optimal", 1: "time limit", 2: "infeasible", 3: "unbounded", 4: "error"}.get(
            result.status, str(result.status)
        )
        if result.x is None:
            return None, False, status
        x = np.round(result.x).astype(bool)
        available, recomputed = x[:n], x[n:]
        plan = Plan(
            frozenset(relevant[k] for k in range(n) if available[k] and not recomputed[k]),
            frozenset(relevant[k] for k in range(n) if recomputed[k]),
        ).pruned(problem)
        if plan.violations(problem) or plan.size(problem) > budget:
            return None, False, f"{status}, rounded solution invalid"
        return plan, result.status == _STATUS_OPTIMAL, status
