"""Budgets over the step's peak: the cheapest plan of a structured family whose predicted
peak fits.

A plan's peak depends on when backward rebuilds what (``liveness``): saving nothing makes
backward rebuild the whole forward chain at once, so the fewest saved bytes can give a
higher peak than saving everything. No min cut prices that, so the choice is made over a
family of plans, each scored by its predicted peak:

- the saved-bytes frontier (``frontier.hull``): the cheapest plan at each level of bytes;
- segment plans (Chen et al.'s sqrt(N), generalised): the forward cut into K segments of
  equal activation bytes, only values crossing a boundary savable, for K = 2, 4, 8, ...
  and sqrt(N); for each K the cheapest and the smallest such plan. Backward then rebuilds
  one segment at a time: the working set shrinks with K while the boundaries grow.

The ratio spans the lowest predicted peak of the family (0) to the fastest plan's (1).
The choice is the cheapest plan whose peak fits, ties to the lower peak, so a lower
budget never gives a higher peak. Plans are ranked by a fast estimate (the graph walk on
the joint graph, ``plan_peak``); the peaks that set the range and decide are the exact
predictions of the plans on the estimate's peak/cost Pareto front (``_checked``), the
same plans at every budget below 1. Budget 1 is the fastest plan's own peak, so only a plan
as cheap can be chosen over it: only those are searched and checked there, and the
report leaves the range's low end, which that choice does not need, unknown.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from recompute_pass.search.peak_milp import estimate_caps
from recompute_pass.search.scorer import PlanScorer
from recompute_pass.solver.cut import CutGraph
from recompute_pass.solver.frontier import dominant_price
from recompute_pass.solver.problem import Plan, Problem
from recompute_pass.solver.strategies.fixed import policy_problem
from recompute_pass.solver.strategies.strategy_sqrt_n import block_segments, segment_policy, segments

log = logging.getLogger(__name__)

# At most this many plans' exact peaks are predicted per graph (each one an Inductor
# lowering under torch.compile).
MAX_CHECKED = 8
# One plan's peak through Inductor's lowering and scheduler takes about 3.5 ms per
# joint-graph node (the zoo's 2-layer models on the 2-core benchmark CPU). The number of
# such checks is set from this, not from the clock, so that a graph gets the same plan on
# any machine and under any load; the clock stops them only far past the time limit.
_CHECK_SECONDS_PER_NODE = 3.5e-3


# With peaks composed from a deep graph's pieces (``memory.composed``) a check lowers only
# the pieces no earlier check lowered: this many plans of the front, at any depth.
COMPOSED_CHECKS = MAX_CHECKED


def checks_within(time_limit: float, nodes: int) -> int:
    """How many plans' exact peaks (Inductor lowerings) fit ``time_limit`` on a graph of
    ``nodes`` nodes: at least the range's two ends, at most ``MAX_CHECKED``."""
    return max(2, min(MAX_CHECKED, int(time_limit / (max(1, nodes) * _CHECK_SECONDS_PER_NODE))))


@dataclass(frozen=True)
class PeakChoice:
    plan: Plan
    cap: int  # the peak budget in bytes
    min_peak: int | None  # the lowest predicted peak of the family (None: not searched, at budget 1)
    max_peak: int  # the fastest plan's predicted peak
    frontier: tuple[tuple[int, float], ...]  # (peak, estimated overhead) Pareto points
    notes: tuple[str, ...]


def segment_plans(problem: Problem) -> list[Plan]:
    """The cheapest and the smallest plan saving only segment boundaries, per K segments of
    equal bytes, and per cut at the repeated blocks (two blocks, one, or half a block a
    segment) where the graph has them."""
    activations = sum(it.is_forward and it.can_save and it.size > 0 for it in problem.items)
    counts = {2**j for j in range(1, max(1, activations).bit_length())}
    counts.add(max(2, round(math.sqrt(activations))))
    cuts = [segments(problem, count) for count in sorted(counts)]
    cuts += [cut for per_block in BLOCK_CUTS if (cut := block_segments(problem, per_block)) is not None]
    plans: list[Plan] = []
    for cut in cuts:
        restricted = policy_problem(problem, *segment_policy(problem, segment=cut))
        graph = CutGraph.build(restricted)
        plans += [graph.solve(restricted, 0.0), graph.solve(restricted, dominant_price(restricted))]
    return plans


# Segments per repeated block in the block-aligned segment plans.
BLOCK_CUTS = (0.5, 1.0, 2.0)


def choose_by_peak(
    problem: Problem,
    frontier: tuple[Plan, ...],
    scorer: PlanScorer,
    *,
    ratio: float | None,
    cap: int | None,
    deadline: float,
    check_deadline: float | None = None,
    extra: Sequence[Plan] = (),
) -> PeakChoice:
    """``frontier``: the saved-bytes hull, fewest bytes first, the fastest plan last.
    ``ratio`` or ``cap`` (bytes) sets the budget. ``scorer.estimate`` ranks the plans;
    ``scorer.exact`` (what the report will say) is asked for at most ``scorer.checks``
    plans of the estimate's peak/cost front (``_checked``), the same plans at any budget,
    and for the plans ``scorer.optimum`` adds (the cheapest at the lowest estimated peak
    and at the budget); ``check_deadline`` (default ``deadline``) stops the checks only as a
    safety. ``extra``: more plans for the family (plans that offload values, ``offload_search``)."""
    fastest = frontier[-1]
    if cap is None and ratio == 1:
        return _at_budget_one(problem, fastest, [*frontier, *extra], scorer, deadline)
    candidates = list(dict.fromkeys([fastest, *reversed(frontier[:-1]), *segment_plans(problem), *extra]))
    scored: dict[Plan, tuple[int, float]] = {}
    notes: list[str] = []
    for plan in candidates:  # the fastest plan first: the budget's upper end
        if scored and time.monotonic() > deadline:
            note = f"peak search stopped by the time limit after {len(scored)} of {len(candidates)} plans"
            log.warning("recompute_pass: %s; using the best of those", note)
            notes.append(note)
            break
        scored[plan] = (scorer.estimate(plan), plan.cost(problem))
    exact: dict[Plan, int] = {}

    def exact_of(plan: Plan) -> int:
        if plan not in exact:
            exact[plan] = scorer.exact(plan)
        return exact[plan]

    # The plans checked do not depend on the budget, so a lower budget can only remove
    # plans from those that fit: the chosen peak never rises as the budget falls.
    checked = _checked(scored, fastest, scorer.checks)
    stop = deadline if check_deadline is None else check_deadline
    for plan in [fastest, *(p for p in checked if p != fastest)]:  # the range's top first
        if exact and time.monotonic() > stop:
            note = f"exact peaks of {len(exact)} of {len(checked)} plans before the time limit"
            if not notes:  # one warning per graph: the scoring may have stopped already
                log.warning("recompute_pass: %s; choosing among those", note)
            notes.append(note)
            break
        exact_of(plan)
    max_peak = exact[fastest]
    min_peak = min(exact.values())
    if cap is None:
        assert ratio is not None
        budget = min_peak + int((max_peak - min_peak) * ratio)
    else:
        budget = cap
        if cap < min_peak:
            log.warning(
                "recompute_pass: peak_memory_bytes=%d is below the lowest predicted peak, %d bytes; "
                "using the lowest-peak plan",
                cap,
                min_peak,
            )
            notes.append(f"peak cap {cap} B infeasible; lowest-peak plan used")
            budget = min_peak
    lowest = min(exact, key=lambda p: (exact[p], scored[p][1]))
    ends = (min_peak, scored[lowest][0]), (max_peak, scored[fastest][0])
    for found in scorer.optimum(lambda: estimate_caps(budget, *ends), deadline):
        scored.setdefault(found, (scorer.estimate(found), found.cost(problem)))
        exact_of(found)
    fitting = [p for p in exact if exact[p] <= budget]
    plan = min(fitting, key=lambda p: (scored[p][1], exact[p]))
    notes.append(f"peak search over {len(scored)} plans, {len(exact)} checked")
    points = [(exact.get(p, peak), cost) for p, (peak, cost) in scored.items()]
    return PeakChoice(plan, budget, min_peak, max_peak, _pareto(points), tuple(notes))


def _at_budget_one(
    problem: Problem, fastest: Plan, family: Sequence[Plan], scorer: PlanScorer, deadline: float
) -> PeakChoice:
    """Budget 1: the fastest plan's own peak, which it fits. Only a plan as cheap can be
    chosen over it (ties go to the lower peak: an offload plan, say), so only those are
    checked, and no other plan is scored: the range below is searched by lower budgets
    (at 48 layers the walk over the family's 33 plans took 3 s of 11)."""
    cheapest = fastest.cost(problem) * (1 + 1e-9)
    tied = [p for p in dict.fromkeys(family) if p.cost(problem) <= cheapest]
    # Small graphs: an equally cheap plan the MILP finds (deep ones skip it, and the estimate).
    found = scorer.optimum(lambda: [scorer.estimate(fastest)], deadline)
    tied += [p for p in found if p.cost(problem) <= cheapest and p not in tied]
    exact = {plan: scorer.exact(plan) for plan in tied}
    cap = exact[fastest]
    plan = min((p for p in tied if exact[p] <= cap), key=lambda p: (p.cost(problem), exact[p]))
    notes = (
        "budget 1: only plans as cheap as the fastest searched",
        f"peak search over {len(tied)} plans, {len(exact)} checked",
    )
    points = _pareto([(exact[p], p.cost(problem)) for p in tied])
    return PeakChoice(plan, cap, None, cap, points, notes)


def _checked(scored: dict[Plan, tuple[int, float]], fastest: Plan, limit: int) -> list[Plan]:
    """The plans whose exact peak is predicted: those no other plan beats on both the
    estimated peak and the cost, at most ``limit`` (>= 2) of them, spread evenly over the
    estimate's range (the lowest and the fastest always in)."""
    front = sorted((p for p in scored if _undominated(scored, p)), key=lambda p: scored[p])
    if fastest not in front:
        front.append(fastest)
    if len(front) <= limit:
        return front
    step = (len(front) - 1) / (limit - 1)
    return list(dict.fromkeys(front[round(i * step)] for i in range(limit)))


def _undominated(scored: dict[Plan, tuple[int, float]], plan: Plan) -> bool:
    peak, cost = scored[plan]
    return not any(
        (other_peak <= peak and other_cost < cost) or (other_peak < peak and other_cost <= cost)
        for other_peak, other_cost in scored.values()
    )


def _pareto(points: list[tuple[int, float]]) -> tuple[tuple[int, float], ...]:
    """(peak, cost) points no other point beats on both, lowest peak first."""
    result: list[tuple[int, float]] = []
    for peak, cost in sorted(set(points)):
        if not result or cost < result[-1][1]:
            result.append((peak, cost))
    return tuple(result)
