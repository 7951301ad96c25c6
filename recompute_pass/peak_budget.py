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
predictions of a few plans (``_cheapest_fitting``).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from recompute_pass.cut import CutGraph
from recompute_pass.frontier import dominant_price
from recompute_pass.problem import Plan, Problem
from recompute_pass.strategies.fixed import policy_problem
from recompute_pass.strategies.strategy_sqrt_n import segment_policy

log = logging.getLogger(__name__)

# Plans whose exact peak is checked against the budget, cheapest first, and how far above
# the budget a calibrated estimate may be and still be checked.
_VERIFIED = 4
_ESTIMATE_SLACK = 0.05


@dataclass(frozen=True)
class PeakChoice:
    plan: Plan
    cap: int  # the peak budget in bytes
    min_peak: int  # the lowest predicted peak of the family
    max_peak: int  # the fastest plan's predicted peak
    frontier: tuple[tuple[int, float], ...]  # (peak, estimated overhead) Pareto points
    notes: tuple[str, ...]


def segment_plans(problem: Problem) -> list[Plan]:
    """The cheapest and the smallest plan saving only segment boundaries, per K."""
    activations = sum(it.is_forward and it.can_save and it.size > 0 for it in problem.items)
    counts = {2**j for j in range(1, max(1, activations).bit_length())}
    counts.add(max(2, round(math.sqrt(activations))))
    plans: list[Plan] = []
    for count in sorted(counts):
        restricted = policy_problem(problem, *segment_policy(problem, count))
        graph = CutGraph.build(restricted)
        plans += [graph.solve(restricted, 0.0), graph.solve(restricted, dominant_price(restricted))]
    return plans


def choose_by_peak(
    problem: Problem,
    frontier: tuple[Plan, ...],
    peak_of: Callable[[Plan], int],
    exact_peak_of: Callable[[Plan], int],
    *,
    ratio: float | None,
    cap: int | None,
    deadline: float,
    extra: Sequence[Plan] = (),
) -> PeakChoice:
    """``frontier``: the saved-bytes hull, fewest bytes first, the fastest plan last.
    ``ratio`` or ``cap`` (bytes) sets the budget. ``peak_of`` estimates a plan's peak
    quickly (the graph walk on the joint graph); ``exact_peak_of`` is what the report will
    say (the extracted graphs walked, or Inductor's memory plan), checked for the ends of
    the range and for the choice, a handful of plans. ``extra``: more plans for the family
    (plans that offload values, ``offload_search``)."""
    fastest = frontier[-1]
    candidates = list(dict.fromkeys([fastest, *reversed(frontier[:-1]), *segment_plans(problem), *extra]))
    scored: dict[Plan, tuple[int, float]] = {}
    notes: list[str] = []
    for plan in candidates:  # the fastest plan first: the budget's upper end
        if scored and time.monotonic() > deadline:
            notes.append(f"peak search stopped by the time limit after {len(scored)} plans")
            break
        scored[plan] = (peak_of(plan), plan.cost(problem))
    exact: dict[Plan, int] = {}

    def exact_of(plan: Plan) -> int:
        if plan not in exact:
            exact[plan] = exact_peak_of(plan)
        return exact[plan]

    lowest = min(scored, key=lambda p: (scored[p][0], scored[p][1]))
    max_peak = exact_of(fastest)
    min_peak = min(exact_of(lowest), max_peak)
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
    plan = _cheapest_fitting(scored, exact_of, exact, budget)
    notes.append(f"peak search over {len(scored)} plans, {len(exact)} checked")
    points = [(exact.get(p, peak), cost) for p, (peak, cost) in scored.items()]
    return PeakChoice(plan, budget, min_peak, max_peak, _pareto(points), tuple(notes))


def _cheapest_fitting(
    scored: dict[Plan, tuple[int, float]],
    exact_of: Callable[[Plan], int],
    exact: dict[Plan, int],
    budget: int,
) -> Plan:
    """The cheapest plan whose exact peak fits, checking at most ``_VERIFIED`` more plans.

    The estimate and the exact peak can differ by a quarter under Inductor, so a plan's
    estimate is first scaled by the exact/estimate ratio of the checked plan whose estimate
    is nearest (the ends of the range are checked already); plans whose scaled estimate
    is within the slack are checked, cheapest first. One of the ends always fits.
    """
    ranked = sorted(scored, key=lambda p: (scored[p][1], scored[p][0]))  # cheapest first
    checks = 0
    for plan in ranked:
        if plan in exact:
            if exact[plan] <= budget:
                return plan
            continue
        if checks == _VERIFIED:
            continue
        estimate = scored[plan][0]
        nearest = min(exact, key=lambda p: (abs(scored[p][0] - estimate), scored[p][1]))
        scale = exact[nearest] / scored[nearest][0] if scored[nearest][0] else 1.0
        if estimate * scale <= budget * (1 + _ESTIMATE_SLACK):
            checks += 1
            if exact_of(plan) <= budget:
                return plan
    fitting = [p for p in exact if exact[p] <= budget]
    return min(fitting, key=lambda p: (scored[p][1], exact[p]))


def _pareto(points: list[tuple[int, float]]) -> tuple[tuple[int, float], ...]:
    """(peak, cost) points no other point beats on both, lowest peak first."""
    result: list[tuple[int, float]] = []
    for peak, cost in sorted(set(points)):
        if not result or cost < result[-1][1]:
            result.append((peak, cost))
    return tuple(result)
