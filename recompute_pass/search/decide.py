"""Stage 3: turn the budget into bytes and run the chosen strategy.

Saved-bytes budgets: the ratio spans the activation bytes valid plans can save: 0 is the
fewest any plan saves, 1 is what the cheapest plan (by the cost model) saves. Both ends
are exact unbudgeted problems, solved as min cuts: the end points of the frontier's hull.
The relaxation that holds them is built once per graph and shared with the strategy.

Peak budgets (``budget_mode="peak"``, ``peak_memory_bytes``): ``peak_budget`` chooses
among the hull and segment plans by their predicted peak, which the caller's
``PlanScorer`` computes.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from recompute_pass.options import RecomputeOptions
from recompute_pass.search.offload import OffloadSearch
from recompute_pass.search.peak_budget import choose_by_peak
from recompute_pass.search.scorer import PlanScorer
from recompute_pass.solver.frontier import Relaxation, hull
from recompute_pass.solver.problem import Plan, Problem
from recompute_pass.solver.strategies import STRATEGIES

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Decision:
    plan: Plan
    solver: str
    optimal: bool
    notes: tuple[str, ...]
    budget_ratio: float | None  # None when an absolute budget was given
    budget_bytes: int
    min_bytes: int | None  # None: not searched (a peak budget of 1)
    max_bytes: int
    solve_seconds: float
    frontier: tuple[Plan, ...]  # the memory/cost hull, what other budgets would buy
    # "saved": budget_bytes/min_bytes/max_bytes are saved bytes; "peak": predicted peaks,
    # and ``peak_frontier`` holds the (peak, estimated overhead) trade-off.
    budget_kind: str = "saved"
    peak_frontier: tuple[tuple[int, float], ...] = ()
    # With offload: (peak, estimated overhead, offloaded bytes) Pareto points, the
    # three-way trade-off (``offload_search``).
    offload_frontier: tuple[tuple[int, float, int], ...] = ()


# How far past the time limit the clock stops the exact peak checks: a safety only, since
# ``PlanScorer.checks`` decides how many are made (a count, so that the plan does not depend on
# load). At 2 it fired on a 2-core machine running three compiles, and dropped the check of
# nanoGPT's lowest exact peak.
SAFETY_FACTOR = 9


def decide(problem: Problem, options: RecomputeOptions, scorer: PlanScorer | None = None) -> Decision:
    """``scorer``: the plans' peaks and offload windows (``search.scorer``), needed when the
    budget is over the peak; the offload plans join the search when ``options.offload``."""
    start = time.perf_counter()
    deadline = time.monotonic() + options.time_limit
    relaxation = Relaxation.of(problem)
    # Fewest bytes first, cheapest last; within the time limit, coarser but exact.
    frontier = hull(relaxation, deadline=deadline)
    if options.budgets_peak and options.solver in ("milp", "mincut"):
        if scorer is None:
            raise ValueError("a peak budget needs the plans' predicted peaks (a PlanScorer)")
        search = OffloadSearch.of(problem, frontier, scorer, options, deadline) if options.offload else None
        choice = choose_by_peak(
            problem,
            frontier,
            scorer if search is None else search.recording(scorer),
            ratio=None if options.peak_memory_bytes is not None else options.memory_budget,
            cap=options.peak_memory_bytes,
            deadline=deadline,
            check_deadline=deadline + SAFETY_FACTOR * options.time_limit,
            extra=search.plans if search is not None else (),
        )
        return Decision(
            plan=choice.plan,
            solver="peak" if search is None else "peak+offload",
            optimal=False,
            notes=choice.notes if search is None else (*choice.notes, *search.notes),
            budget_ratio=None if options.peak_memory_bytes is not None else options.memory_budget,
            budget_bytes=choice.cap,
            min_bytes=choice.min_peak,
            max_bytes=choice.max_peak,
            solve_seconds=time.perf_counter() - start,
            frontier=frontier,
            budget_kind="peak",
            peak_frontier=choice.frontier,
            offload_frontier=search.frontier(problem) if search is not None else (),
        )
    low, high = frontier[0].size(problem), frontier[-1].size(problem)
    notes: list[str] = []
    if options.memory_budget_bytes is not None:
        ratio = None
        budget = options.memory_budget_bytes
        if budget < low:
            log.warning(
                "recompute_pass: memory_budget_bytes=%d is below the %d bytes the smallest valid plan "
                "saves; using that plan",
                budget,
                low,
            )
            notes.append(f"absolute budget {budget} B infeasible; minimum plan used")
            budget = low
    else:
        ratio = options.memory_budget
        # Rounded down, so that rounding never lets the plan exceed the ratio's bytes.
        budget = low + int((high - low) * ratio)
    strategy = STRATEGIES[options.solver]
    solution = strategy.solve(relaxation, budget, time_limit=options.time_limit)
    plan = solution.plan
    violations = plan.violations(problem)
    if violations:
        raise RuntimeError(f"solver {strategy.name!r} returned an invalid plan: {violations[:5]}")
    size = plan.size(problem)
    if size > budget:
        if strategy.honours_budget:
            raise RuntimeError(f"solver {strategy.name!r} exceeded the budget: {size} > {budget} bytes")
        notes.append(f"over budget by {size - budget} B (policy ignores the budget)")
    return Decision(
        plan=plan,
        solver=strategy.name,
        optimal=solution.optimal,
        notes=(*notes, *solution.notes),
        budget_ratio=ratio,
        budget_bytes=budget,
        min_bytes=low,
        max_bytes=high,
        solve_seconds=time.perf_counter() - start,
        frontier=frontier,
    )
