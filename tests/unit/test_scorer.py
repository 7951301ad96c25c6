"""The peak search driven by a fake ``PlanScorer``: plain numbers, no torch graph.

The search must choose the cheapest plan whose exact peak fits, ask for at most
``checks`` exact peaks (plus those of the optimum's plans), and use the estimate only to
rank plans: a plan the estimate flatters but whose exact peak is over the budget is never
chosen, and a transform of the estimate that keeps its order changes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from recompute_pass import RecomputeOptions
from recompute_pass.search.decide import decide
from recompute_pass.search.peak_budget import PeakChoice, choose_by_peak, segment_plans
from recompute_pass.solver.frontier import Relaxation, hull
from recompute_pass.solver.problem import Item, Plan, Problem
from tests.support.scorers import FakeScorer


def _chain(n: int = 12) -> Problem:
    """An input, then a chain of ``n`` forward values of uneven sizes and costs, all needed
    by backward."""
    items = [Item("x", 0, 0.0, 0.0, (), can_save=True, can_recompute=False)]
    for i in range(1, n + 1):
        size, cost = 100 + 37 * (i % 5), 1.0 + (i * 7 % 11)
        items.append(Item(f"v{i}", size, 0.0, cost, (i - 1,), can_save=True, can_recompute=True))
    return Problem(tuple(items), frozenset(range(1, n + 1)))


PROBLEM = _chain()
FRONTIER = hull(Relaxation.of(PROBLEM), deadline=math.inf)
FAMILY = list(dict.fromkeys([*FRONTIER, *segment_plans(PROBLEM)]))


def exact_peak(plan: Plan) -> int:
    """A made-up peak: the saved bytes, plus twice the bytes of the longest run of
    recomputed values (as if backward rebuilt one run at a time, all of it at once)."""
    run = longest = 0
    for i, item in enumerate(PROBLEM.items):
        run = run + item.size if i in plan.recomputed else 0
        longest = max(longest, run)
    return plan.size(PROBLEM) + 2 * longest


def _choose(scorer: FakeScorer, *, ratio: float | None = None, cap: int | None = None) -> PeakChoice:
    return choose_by_peak(PROBLEM, FRONTIER, scorer, ratio=ratio, cap=cap, deadline=math.inf)


def test_the_family_has_a_range_of_peaks() -> None:
    assert len(FAMILY) >= 4
    assert len({exact_peak(p) for p in FAMILY}) >= 3


@pytest.mark.parametrize("ratio", [0.0, 0.3, 0.6, 1.0])
def test_the_cheapest_plan_whose_exact_peak_fits_is_chosen(ratio: float) -> None:
    scorer = FakeScorer(exact_peak, exact_peak, checks=len(FAMILY))
    choice = _choose(scorer, ratio=ratio)
    peaks = [exact_peak(p) for p in FAMILY]
    low, high = min(peaks), exact_peak(FRONTIER[-1])
    assert (choice.min_peak, choice.max_peak) == (low if ratio < 1 else None, high)
    assert choice.cap == low + int((high - low) * ratio)
    fitting = [p for p in FAMILY if exact_peak(p) <= choice.cap]
    best = min(fitting, key=lambda p: (p.cost(PROBLEM), exact_peak(p)))
    assert (choice.plan.cost(PROBLEM), exact_peak(choice.plan)) == (best.cost(PROBLEM), exact_peak(best))


@pytest.mark.parametrize("checks", [2, 3, 5])
def test_no_more_exact_checks_than_the_scorer_affords(checks: int) -> None:
    scorer = FakeScorer(exact_peak, exact_peak, checks=checks)
    choice = _choose(scorer, ratio=0.5)
    assert len(set(scorer.checked)) <= checks
    assert len(scorer.checked) == len(set(scorer.checked))  # each plan checked once
    assert scorer.checked[0] == FRONTIER[-1]  # the range's top first
    assert choice.plan in scorer.checked and exact_peak(choice.plan) <= choice.cap
    assert f"{len(scorer.checked)} checked" in choice.notes[-1]


def test_a_flattering_estimate_does_not_choose_a_plan_over_the_budget() -> None:
    """The estimate puts the costliest plan, whose exact peak is over the cap, at peak 0:
    it is checked (the estimate ranks it lowest), its exact peak rules it out, and the
    choice is the one an honest estimate gives."""
    cap = sorted(exact_peak(p) for p in FAMILY)[len(FAMILY) // 2]
    flattered = max((p for p in FAMILY if exact_peak(p) > cap), key=lambda p: p.cost(PROBLEM))

    def estimate(plan: Plan) -> int:
        return 0 if plan == flattered else exact_peak(plan)

    honest = _choose(FakeScorer(exact_peak, exact_peak, checks=len(FAMILY)), cap=cap)
    scorer = FakeScorer(estimate, exact_peak, checks=len(FAMILY))
    choice = _choose(scorer, cap=cap)
    assert flattered in scorer.checked
    assert choice.plan == honest.plan != flattered and exact_peak(choice.plan) <= cap
    assert choice.min_peak == min(exact_peak(p) for p in scorer.checked)  # exact peaks set the range


def test_an_order_keeping_transform_of_the_estimate_changes_no_choice() -> None:
    def skewed(plan: Plan) -> int:
        return 7 * exact_peak(plan) ** 2 + 11

    for ratio in (0.0, 0.5, 1.0):
        plain, twisted = FakeScorer(exact_peak, exact_peak), FakeScorer(skewed, exact_peak)
        a, b = _choose(plain, ratio=ratio), _choose(twisted, ratio=ratio)
        assert (a.plan, a.cap, a.min_peak, a.max_peak) == (b.plan, b.cap, b.min_peak, b.max_peak)
        assert plain.checked == twisted.checked


def test_the_optimum_plans_join_the_choice_and_are_checked_exactly() -> None:
    """A plan only the optimum knows, at the lowest peak and cheaper than any plan there,
    is checked beyond ``checks`` and chosen at budget 0."""
    lowest = min(FAMILY, key=lambda p: (exact_peak(p), p.cost(PROBLEM)))
    # The lowest plan with one more value saved: less recompute, the same peak by fiat.
    extra = min(i for i in lowest.recomputed if PROBLEM.items[i].can_save)
    novel = Plan(saved=lowest.saved | {extra}, recomputed=lowest.recomputed - {extra})
    assert novel not in FAMILY and not novel.violations(PROBLEM)
    assert novel.cost(PROBLEM) < lowest.cost(PROBLEM)
    asked: list[tuple[int, ...]] = []

    def optimum(caps: Sequence[int], deadline: float) -> list[Plan]:
        asked.append(tuple(caps))
        return [novel]

    def exact(plan: Plan) -> int:
        return exact_peak(lowest) if plan == novel else exact_peak(plan)

    scorer = FakeScorer(exact, exact, checks=2, optimum_of=optimum)
    choice = _choose(scorer, ratio=0.0)
    assert asked and scorer.checked[-1] == novel and len(set(scorer.checked)) == 3
    assert choice.plan == novel and choice.cap == exact_peak(lowest)


def test_decide_searches_peaks_through_the_scorer_alone() -> None:
    options = RecomputeOptions(budget_mode="peak", memory_budget=0.5)
    scorer = FakeScorer(exact_peak, exact_peak, checks=4)
    decision = decide(PROBLEM, options, scorer)
    assert decision.budget_kind == "peak" and decision.solver == "peak"
    assert exact_peak(decision.plan) <= decision.budget_bytes
    assert decision.plan in scorer.checked and len(set(scorer.checked)) <= 4
    assert not decision.plan.violations(PROBLEM)


def test_a_peak_budget_without_a_scorer_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="PlanScorer"):
        decide(PROBLEM, RecomputeOptions(budget_mode="peak"))


def test_budget_one_checks_only_the_fastest_plan_and_chooses_it() -> None:
    """At budget 1 the cap is the fastest plan's own exact peak, which it fits, and it is
    the cheapest plan: the other plans' exact peaks cannot change the choice, so only it is
    checked, and the range's low end is left unknown, said in a note. Nothing is estimated
    where no MILP is built. The plan equals the one a check of every plan gives."""
    estimate = {p: exact_peak(p) + 7 * i for i, p in enumerate(FAMILY)}  # not the exact ranking
    lazy = FakeScorer(estimate.__getitem__, exact_peak, checks=len(FAMILY))
    choice = _choose(lazy, ratio=1.0)
    assert choice.plan == FRONTIER[-1]
    assert lazy.checked == [FRONTIER[-1]]
    assert lazy.estimated == []  # no MILP here (a deep graph's case): its cap is not estimated
    assert choice.max_peak == choice.cap == exact_peak(FRONTIER[-1])
    assert choice.min_peak is None and "only plans as cheap as the fastest" in choice.notes[0]
    assert f"{len(lazy.checked)} checked" in choice.notes[-1]
    # What checking every plan gives: the cheapest plan whose exact peak fits that cap.
    fitting = [p for p in FAMILY if exact_peak(p) <= choice.cap]
    best = min(fitting, key=lambda p: (p.cost(PROBLEM), exact_peak(p)))
    assert choice.plan.cost(PROBLEM) == best.cost(PROBLEM)


@pytest.mark.parametrize(
    ("kind", "value", "spares"),
    [("ratio", 0.0, True), ("ratio", 0.3, True), ("ratio", 0.6, False), ("cap", 1800, True)],
)
def test_a_lower_bound_spares_checks_and_changes_no_choice(kind: str, value: float, spares: bool) -> None:
    """With a lower bound 10% under each plan's exact peak, the search chooses what checking
    every plan of the front chooses, and checks fewer where a bound rules a plan out (low
    budgets here: the front's four plans are over them on their lower bounds alone)."""
    kwargs = {"ratio": value} if kind == "ratio" else {"cap": int(value)}
    every = FakeScorer(exact_peak, exact_peak, checks=len(FAMILY))
    bounded = FakeScorer(exact_peak, exact_peak, checks=len(FAMILY), lower_bound_of=_tenth_under)
    a, b = _choose(every, **kwargs), _choose(bounded, **kwargs)
    assert (a.plan, a.cap, a.min_peak) == (b.plan, b.cap, b.min_peak)
    # The range's top is checked where the budget is a ratio between the ends, else only
    # where the choice itself asks for it (checking every plan, it does).
    if kind == "ratio" and value > 0:
        assert b.max_peak == a.max_peak == exact_peak(FRONTIER[-1])
    else:
        assert b.max_peak in (None, a.max_peak)
    if kind == "ratio" and value == 0:  # the fastest plan's lower bound is over the low end: not lowered
        assert b.max_peak is None and FRONTIER[-1] not in bounded.checked
    assert set(bounded.checked) <= set(every.checked)
    assert (set(bounded.checked) < set(every.checked)) == spares
    assert (f"{len(bounded.checked)} checked (" in b.notes[-1]) == spares


def _tenth_under(plan: Plan) -> int:
    return exact_peak(plan) * 9 // 10


@pytest.mark.parametrize("ratio", [0.0, 0.25, 0.5])
def test_a_lower_bound_pushed_against_a_limit_spares_checks_and_changes_no_choice(ratio: float) -> None:
    """Plain lower bounds far under the peaks (a tenth) rule nothing out; pushed against what
    a plan must beat (``PlanScorer.lower_bound(plan, over)``: 1% under) they rule out the plans
    over it, which are then never checked, and the choice is what checking every plan of
    the front gives."""
    every = FakeScorer(exact_peak, exact_peak, checks=len(FAMILY))
    pushed = FakeScorer(
        exact_peak,
        exact_peak,
        checks=len(FAMILY),
        lower_bound_of=lambda p: exact_peak(p) // 10,
        bound_of=lambda p: exact_peak(p) * 99 // 100,
    )
    a, b = _choose(every, ratio=ratio), _choose(pushed, ratio=ratio)
    assert (a.plan, a.cap, a.min_peak) == (b.plan, b.cap, b.min_peak)
    assert b.max_peak == a.max_peak if ratio else b.max_peak in (None, a.max_peak)  # at 0 the top is unasked
    assert pushed.bounded and set(pushed.checked) < set(every.checked)
    ruled_out = set(pushed.bounded) - set(pushed.checked)
    assert ruled_out and all(exact_peak(p) > b.cap for p in ruled_out)


def test_a_lower_bound_over_an_exact_peak_is_not_trusted(caplog: pytest.LogCaptureFixture) -> None:
    """Lower bounds above the exact peaks (wrong bounds, as a misprediction would give) rule
    out the plan that should be chosen at budget 0: seen on the plans checked, the search
    warns and chooses as it would without lower bounds."""
    every = FakeScorer(exact_peak, exact_peak, checks=len(FAMILY))
    wrong = FakeScorer(
        exact_peak, exact_peak, checks=len(FAMILY), lower_bound_of=lambda p: exact_peak(p) + 500
    )
    a = _choose(every, ratio=0.0)
    with caplog.at_level("WARNING"):
        b = _choose(wrong, ratio=0.0)
    assert (a.plan, a.cap, a.min_peak, a.max_peak) == (b.plan, b.cap, b.min_peak, b.max_peak)
    assert "below its plan's saved bytes" in caplog.text


@pytest.mark.parametrize("ratio", [0.0, 0.5])
def test_checks_past_their_time_limit_choose_among_those_made(
    caplog: pytest.LogCaptureFixture, ratio: float
) -> None:
    """A check deadline already past (a safety, never reached on a graph the count fits):
    only the one plan the budget cannot do without is checked (the range's top where the
    ratio needs it, else the low end's lowest lower bound), one warning, and that plan is
    chosen; no lower bound is pushed (that too costs lowerings)."""
    scorer = FakeScorer(
        exact_peak, exact_peak, checks=len(FAMILY), lower_bound_of=_tenth_under, bound_of=exact_peak
    )
    with caplog.at_level("WARNING"):
        choice = choose_by_peak(
            PROBLEM, FRONTIER, scorer, ratio=ratio, cap=None, deadline=math.inf, check_deadline=-math.inf
        )
    (checked,) = scorer.checked
    if ratio:
        assert checked == FRONTIER[-1] and choice.max_peak == exact_peak(checked)
    else:  # the lowest lower bound's plan: lower bounds are 90% of the exact peaks here
        assert exact_peak(checked) == min(exact_peak(p) for p in FAMILY) and choice.max_peak is None
    assert choice.plan == checked and choice.min_peak == choice.cap == exact_peak(checked)
    assert "exact peaks stopped by the time limit" in choice.notes
    assert len([r for r in caplog.records if "time limit" in r.getMessage()]) == 1
    assert not scorer.bounded


def test_the_low_end_is_sought_from_the_lowest_estimate() -> None:
    """At budget 0 the plan the estimate ranks lowest is checked first, though lower bounds
    rank it last (here they fall as the peaks rise, all under the lowest peak); the others'
    lower bounds, pushed against its peak, rule them out unchecked. The choice is the one
    checking every plan gives."""
    every = FakeScorer(exact_peak, exact_peak, checks=len(FAMILY))
    _choose(every, ratio=0.0)
    lowest = min(exact_peak(p) for p in every.checked)
    ranked = FakeScorer(
        exact_peak,
        exact_peak,
        checks=len(FAMILY),
        lower_bound_of=lambda p: lowest * lowest * 9 // (10 * exact_peak(p)),
        bound_of=lambda p: exact_peak(p) * 99 // 100,
    )
    a, b = _choose(every, ratio=0.0), _choose(ranked, ratio=0.0)
    assert (a.plan, a.cap, a.min_peak) == (b.plan, b.cap, b.min_peak)
    assert exact_peak(ranked.checked[0]) == lowest
    assert all(exact_peak(p) == lowest for p in ranked.checked)
    assert any(exact_peak(p) > lowest for p in ranked.bounded)
