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
budget never gives a higher peak. This is the fast path: the family is searched, not
every plan; an exact formulation (a MILP with a live-bytes row per position) is future
work.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from recompute_pass.cut import CutGraph
from recompute_pass.frontier import dominant_price
from recompute_pass.problem import Plan, Problem
from recompute_pass.strategies.fixed import policy_problem
from recompute_pass.strategies.strategy_sqrt_n import segment_policy

log = logging.getLogger(__name__)


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
    *,
    ratio: float | None,
    cap: int | None,
    deadline: float,
) -> PeakChoice:
    """``frontier``: the saved-bytes hull, fewest bytes first, the fastest plan last.
    ``ratio`` or ``cap`` (bytes) sets the budget."""
    fastest = frontier[-1]
    candidates = list(dict.fromkeys([fastest, *reversed(frontier[:-1]), *segment_plans(problem)]))
    scored: dict[Plan, tuple[int, float]] = {}
    notes: list[str] = []
    for plan in candidates:  # the fastest plan first: the budget's upper end
        if scored and time.monotonic() > deadline:
            notes.append(f"peak search stopped by the time limit after {len(scored)} plans")
            break
        scored[plan] = (peak_of(plan), plan.cost(problem))
    min_peak = min(peak for peak, _ in scored.values())
    max_peak = scored[fastest][0]
    if cap is None:
        assert ratio is not None
        budget = min_peak + int(max(max_peak - min_peak, 0) * ratio)
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
    fitting = [(cost, peak, i) for i, (plan, (peak, cost)) in enumerate(scored.items()) if peak <= budget]
    _, _, best = min(fitting)
    plan = list(scored)[best]
    notes.append(f"peak search over {len(scored)} plans")
    return PeakChoice(plan, budget, min_peak, max_peak, _pareto(scored.values()), tuple(notes))


def _pareto(points: object) -> tuple[tuple[int, float], ...]:
    """(peak, cost) points no other point beats on both, lowest peak first."""
    result: list[tuple[int, float]] = []
    for peak, cost in sorted(set(points)):  # type: ignore[call-overload]
        if not result or cost < result[-1][1]:
            result.append((peak, cost))
    return tuple(result)
