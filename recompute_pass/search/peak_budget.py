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
same plans at every budget below 1. A check is an Inductor lowering, so a plan is not
checked where its lower bound (its saved bytes, ``PlanScorer.lower_bound``) already rules
it out: over the budget, or over the lowest peak found while the range's low end is sought;
where it does not, the bound is pushed against that limit (a deep graph's peak composed from
the first of the plan's new pieces, ``JointScorer.lower_bound``) before the plan is checked. The
choice is the one checking every plan of that front gives (12 layers: 1-3 checks instead
of 7-8).
Budget 1 is the fastest plan's own peak, so only a plan as cheap can be chosen over it:
only those are searched and checked there, and the report leaves the range's low end,
which that choice does not need, unknown. Likewise budget 0 and an absolute cap are
decided at the low end, so the range's top is checked there only if the choice asks for
it.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from recompute_pass.search.peak_milp import estimate_caps
from recompute_pass.search.scorer import PlanScorer
from recompute_pass.solver.cut import CutGraph
from recompute_pass.solver.frontier import dominant_price
from recompute_pass.solver.problem import Plan, Problem
from recompute_pass.solver.strategies.policy import policy_problem
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
    max_peak: int | None  # the fastest plan's predicted peak (None: not checked, at ratio 0 or a cap)
    frontier: tuple[tuple[int, float], ...]  # (peak, estimated overhead) Pareto points
    notes: tuple[str, ...]


def segment_plans(problem: Problem) -> list[Plan]:
    """The cheapest and the smallest plan saving only segment boundaries, per K segments of
    equal bytes, and per cut at the repeated blocks (two blocks, one, or half a block a
    segment; the head after the last block joined to its segment or apart) where the
    graph has them."""
    activations = sum(it.is_forward and it.can_save and it.size > 0 for it in problem.items)
    counts = {2**j for j in range(1, max(1, activations).bit_length())}
    counts.add(max(2, round(math.sqrt(activations))))
    cuts = [(segments(problem, count), False) for count in sorted(counts)]
    at_blocks = (
        block_segments(problem, per_block, head_apart=head_apart)
        for per_block in BLOCK_CUTS
        for head_apart in (False, True)
    )
    cuts += [(cut, True) for cut in at_blocks if cut is not None]
    plans: list[Plan] = []
    for cut, blocks in cuts:
        restricted = policy_problem(problem, *segment_policy(problem, segment=cut, blocks=blocks))
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
    # The plans the choice is made over do not depend on the budget (the lower bounds only spare
    # checks that cannot change it), so a lower budget can only remove plans from those
    # that fit: the chosen peak never rises as the budget falls.
    checked = _checked(scored, fastest, scorer.checks)
    peaks = _ExactPeaks(scorer, deadline if check_deadline is None else check_deadline, notes)
    # The range's top (the fastest plan's peak) is checked first where the budget needs
    # it: a ratio between the ends. At ratio 0 or under a cap the low end decides, and the
    # report leaves the top, which costs a lowering, unknown unless another step checks it
    # (as budget 1 leaves the low end).
    top = functools.partial(peaks.must, fastest)

    def caps(budget: int, low_end: tuple[int, int]) -> tuple[int, ...]:
        # At the low end the top does not move the caps (``estimate_caps``).
        high = low_end if budget <= low_end[0] else (top(), scored[fastest][0])
        return estimate_caps(budget, low_end, high)

    for bounded in (True, False):  # without lower bounds only if one proved wrong
        peaks.bounded = bounded
        max_peak = top() if cap is None and ratio else None  # the top first, where the ratio needs it
        min_peak = peaks.lowest(checked, {plan: peak for plan, (peak, _) in scored.items()})
        if cap is not None:
            budget = max(cap, min_peak)
        else:
            budget = min_peak if max_peak is None else min_peak + int((max_peak - min_peak) * ratio)
        lowest = min((p for p in checked if peaks.known.get(p) == min_peak), key=lambda p: scored[p][1])
        found = scorer.optimum(functools.partial(caps, budget, (min_peak, scored[lowest][0])), deadline)
        for plan in found:
            scored.setdefault(plan, (scorer.estimate(plan), plan.cost(problem)))
        chosen = peaks.cheapest_fitting(dict.fromkeys([*checked, *found]), budget, problem)
        if chosen is not None and peaks.lower_bounds_held():
            break
        # A plan predicted below its own saved bytes: the lower bounds cannot be trusted, so
        # the choice is made again as it would have been without them.
        log.warning("recompute_pass: a predicted peak below its plan's saved bytes; checking every plan")
    if cap is not None and cap < min_peak:
        log.warning(
            "recompute_pass: peak_memory_bytes=%d is below the lowest predicted peak, %d bytes; "
            "using the lowest-peak plan",
            cap,
            min_peak,
        )
        notes.append(f"peak cap {cap} B infeasible; lowest-peak plan used")
    assert chosen is not None  # without lower bounds, the lowest-peak plan fits
    spared = sum(p not in peaks.known for p in dict.fromkeys([*checked, *found]))
    # "floors" in the note means the lower bounds: reports and recorded results keep its wording.
    notes.append(
        f"peak search over {len(scored)} plans, {len(peaks.known)} checked"
        + (f" ({spared} more of the front ruled out by their floors or cost)" if spared else "")
    )
    points = [(peaks.known.get(p, peak), cost) for p, (peak, cost) in scored.items()]
    return PeakChoice(chosen, budget, min_peak, peaks.known.get(fastest), _pareto(points), tuple(notes))


@dataclass
class _ExactPeaks:
    """Exact peaks, each asked of the scorer once, until ``stop``. ``PlanScorer.lower_bound``
    bounds each from below, so a plan whose lower bound is over what it must beat is not
    checked: the choice is the one checking every plan gives, with fewer checks (at 12
    layers, each a few seconds of Inductor lowering)."""

    scorer: PlanScorer
    stop: float
    notes: list[str]
    known: dict[Plan, int] = field(default_factory=dict)
    lower_bounds: dict[Plan, int] = field(default_factory=dict)
    pushed: set[Plan] = field(default_factory=set)  # lower bounds pushed up against a limit
    bounded: bool = True  # False: every lower bound 0 (one proved wrong)

    def of(self, plan: Plan) -> int | None:
        """None: past the time limit, so left out (the first plan is always checked)."""
        if plan not in self.known and self.known and time.monotonic() > self.stop:
            note = "exact peaks stopped by the time limit"
            if not self.notes:  # one warning per graph: the scoring may have stopped already
                log.warning("recompute_pass: %s; choosing among those checked", note)
            if note not in self.notes:
                self.notes.append(note)
            return None
        return self.must(plan)

    def must(self, plan: Plan) -> int:
        """The plan's exact peak, checked at any time: the search cannot do without it."""
        if plan not in self.known:
            self.known[plan] = self.scorer.exact(plan)
        return self.known[plan]

    def lower_bound(self, plan: Plan) -> int:
        if plan not in self.lower_bounds:
            self.lower_bounds[plan] = self.scorer.lower_bound(plan)
        return self.lower_bounds[plan] if self.bounded else 0

    def over(self, plan: Plan, limit: int) -> bool:
        """Whether the plan's exact peak is over ``limit`` by its lower bound, pushed up (once per
        plan, at a fraction of a check's price, before the time limit) where the plain one
        is not over."""
        if not self.bounded or plan in self.known:
            return False
        if self.lower_bound(plan) <= limit and plan not in self.pushed and time.monotonic() <= self.stop:
            self.pushed.add(plan)
            self.lower_bounds[plan] = max(self.lower_bounds[plan], self.scorer.lower_bound(plan, limit))
        return self.lower_bound(plan) > limit

    def lower_bounds_held(self) -> bool:
        return not self.bounded or all(peak >= self.lower_bound(p) for p, peak in self.known.items())

    def lowest(self, plans: Sequence[Plan], estimates: Mapping[Plan, int]) -> int:
        """The lowest exact peak of ``plans``: the lowest estimate first, so that the
        others' lower bounds are held against a low peak early, and each plan checked unless
        its lower bound, pushed if need be, is over the lowest peak found, or past the time limit
        (then one is checked still). Which plans are checked depends on the order; the
        answer does not: a plan passed over peaks above a peak found."""
        for plan in sorted(plans, key=lambda p: (estimates[p], self.lower_bound(p))):
            found = [self.known[p] for p in plans if p in self.known]
            if not found:
                self.must(plan)
            elif not self.over(plan, min(found)):
                self.of(plan)
        return min(self.known[p] for p in plans if p in self.known)

    def cheapest_fitting(self, plans: Iterable[Plan], budget: int, problem: Problem) -> Plan | None:
        """The cheapest plan whose exact peak fits ``budget``, ties to the lower peak: by
        cost, cheapest first, checking those whose lower bound fits, until one fits."""
        best: tuple[float, int, Plan] | None = None
        for plan in sorted(plans, key=lambda p: p.cost(problem)):
            if best is not None and plan.cost(problem) > best[0]:
                break
            peak = None if self.over(plan, budget) else self.of(plan)
            if peak is not None and peak <= budget and (best is None or peak < best[1]):
                best = (plan.cost(problem), peak, plan)
        return None if best is None else best[2]  # None only under a wrong lower bound


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
