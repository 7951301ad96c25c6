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
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, OptimizeResult, milp
from scipy.sparse import coo_array, csr_array

from recompute_pass.solver.frontier import Relaxation
from recompute_pass.solver.problem import Plan, Problem
from recompute_pass.solver.strategies.base import Solution
from recompute_pass.solver.strategies.strategy_mincut import bracket

log = logging.getLogger(__name__)

_GAP = 1e-6  # relative MIP gap HiGHS must close to call a plan optimal
# The bracket is a warm start, not the answer: a quarter of the time limit, so that when
# the limit stops it early HiGHS still has most of the time to improve on its incumbent.
_WARM_START_SHARE = 0.25
# HiGHS gets at least this much even when the warm start used up the limit: presolve alone
# often proves the incumbent optimal or finds a better plan, which beats giving up at once.
_MIN_HIGHS_SECONDS = 0.05
# The objective cutoff is the incumbent's cost loosened by this relative amount, so that
# the incumbent itself stays feasible under HiGHS's tolerances.
_CUTOFF_SLACK = 1e-9
_STATUS_OPTIMAL = 0
_STATUS_NAMES = {0: "optimal", 1: "time limit", 2: "infeasible", 3: "unbounded", 4: "error"}


class MILPStrategy:
    name = "milp"
    honours_budget = True

    def solve(self, relaxation: Relaxation, budget: float, *, time_limit: float) -> Solution:
        problem = relaxation.problem
        start = time.monotonic()
        warm = bracket(relaxation, budget, time_limit=time_limit * _WARM_START_SHARE)
        incumbent = warm.feasible
        if warm.beyond is None:
            # The unbudgeted optimum fits, or nothing fits: nothing left to optimise.
            fits = incumbent.size(problem) <= budget
            notes = ("unbudgeted optimum fits the budget",) if fits else ("budget below minimum",)
            return Solution(incumbent, optimal=fits, notes=notes)
        model = _Model.build(problem, budget, incumbent.cost(problem))
        result = _run_highs(model, max(time_limit - (time.monotonic() - start), _MIN_HIGHS_SECONDS))
        status = _STATUS_NAMES.get(result.status, str(result.status))
        if status == "infeasible":
            # The incumbent satisfies every row, so this is HiGHS's tolerances speaking,
            # not a property of the problem: keep the min-cut plan, claim nothing more.
            log.debug("recompute_pass: MILP reported infeasible; keeping the min-cut plan")
            return Solution(incumbent, optimal=False, notes=("MILP infeasible (numerics); min-cut plan",))
        plan = None if result.x is None else model.decode(problem, result.x, budget)
        if result.x is not None and plan is None:
            status += ", rounded solution invalid"
        proven = plan is not None and result.status == _STATUS_OPTIMAL
        if plan is None or plan.cost(problem) > incumbent.cost(problem):
            if proven:
                # HiGHS proved that nothing beats the cutoff, the incumbent's cost: its plan
                # ties with the incumbent up to rounding, so the incumbent is optimal too.
                return Solution(incumbent, optimal=True, notes=("MILP optimal; min-cut plan ties",))
            log.warning(
                "recompute_pass: MILP stopped (%s) after %.1fs without beating the min-cut plan; using it",
                status,
                time.monotonic() - start,
            )
            return Solution(incumbent, optimal=False, notes=(f"MILP {status}; min-cut plan",))
        if not proven:  # the time limit: a better plan than min-cut's, but not proven optimal
            log.warning(
                "recompute_pass: MILP stopped (%s) after %.1fs; using its best plan, not proven optimal",
                status,
                time.monotonic() - start,
            )
        return Solution(plan, optimal=proven, notes=(f"MILP {status}",))


@dataclass(frozen=True)
class _Model:
    """The MILP in scipy's form over the items a needed value can depend on (the rest
    are never saved or recomputed). Columns: ``a_k`` at k, ``r_k`` at n + k; costs and
    sizes normalised, for HiGHS's tolerances."""

    relevant: tuple[int, ...]
    objective: np.ndarray
    matrix: csr_array
    upper: np.ndarray  # row bounds (every row is ``<=``)
    bounds: Bounds

    @staticmethod
    def build(problem: Problem, budget: float, cutoff_cost: float) -> _Model:
        items = problem.items
        relevant = tuple(sorted(problem.reach()))
        col = {item: k for k, item in enumerate(relevant)}
        n = len(relevant)
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
        cutoff = cutoff_cost / cost_scale
        row(list(enumerate(objective)), cutoff + _CUTOFF_SLACK * max(abs(cutoff), 1.0))

        lower_bounds = np.zeros(2 * n)
        upper_bounds = np.ones(2 * n)
        for k, i in enumerate(relevant):
            if i in problem.needed:
                lower_bounds[k] = 1.0
            if not items[i].can_recompute:
                upper_bounds[n + k] = 0.0
        matrix = coo_array((vals, (rows, cols)), shape=(len(upper), 2 * n)).tocsr()
        return _Model(relevant, objective, matrix, np.asarray(upper), Bounds(lower_bounds, upper_bounds))

    def decode(self, problem: Problem, x: np.ndarray, budget: float) -> Plan | None:
        """The plan a solution vector rounds to; None when rounding broke a constraint."""
        n = len(self.relevant)
        chosen = np.round(x).astype(bool)
        available, recomputed = chosen[:n], chosen[n:]
        plan = Plan(
            frozenset(self.relevant[k] for k in range(n) if available[k] and not recomputed[k]),
            frozenset(self.relevant[k] for k in range(n) if recomputed[k]),
        ).pruned(problem)
        if plan.violations(problem) or plan.size(problem) > budget:
            return None
        return plan


def _run_highs(model: _Model, time_limit: float) -> OptimizeResult:
    return milp(
        model.objective,
        integrality=np.ones(len(model.objective)),
        bounds=model.bounds,
        constraints=LinearConstraint(model.matrix, -np.inf, model.upper),
        options={"time_limit": time_limit, "mip_rel_gap": _GAP, "presolve": True},
    )
