"""The solvers against brute force on random small problems, and on known structures."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cost_model import MATRIX_KINDS
from recompute_pass.problem import Item, Plan, Problem
from recompute_pass.strategies import STRATEGIES, InfeasibleProblem
from recompute_pass.strategies.cut import CutGraph, check_feasible
from recompute_pass.strategies.strategy_mincut import bracket, hull
from recompute_pass.strategies.strategy_selective import COMPUTE_INTENSIVE


def brute_force(problem: Problem, budget: float) -> Plan | None:
    """Cheapest valid plan within budget, by enumerating every assignment."""
    best: Plan | None = None
    n = len(problem)
    for choice in itertools.product((0, 1, 2), repeat=n):
        plan = Plan(
            frozenset(i for i in range(n) if choice[i] == 1),
            frozenset(i for i in range(n) if choice[i] == 2),
        )
        if plan.violations(problem) or plan.size(problem) > budget:
            continue
        if best is None or plan.cost(problem) < best.cost(problem) - 1e-12:
            best = plan
    return best


@st.composite
def problems(draw: st.DrawFn, max_items: int = 7) -> Problem:
    n = draw(st.integers(1, max_items))
    items = []
    for i in range(n):
        inputs = tuple(sorted(draw(st.sets(st.integers(0, i - 1), max_size=3)))) if i else ()
        items.append(
            Item(
                name=f"v{i}",
                size=draw(st.integers(0, 64)),
                save_cost=draw(st.floats(0, 10, allow_nan=False)),
                recompute_cost=draw(st.floats(0, 10, allow_nan=False)),
                inputs=inputs,
                can_save=draw(st.booleans()),
                can_recompute=draw(st.booleans()) if inputs else False,
            )
        )
    needed = draw(st.sets(st.integers(0, n - 1), min_size=1))
    return Problem(tuple(items), frozenset(needed))


def _feasible(problem: Problem) -> bool:
    try:
        check_feasible(problem)
    except InfeasibleProblem:
        return False
    return True


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(problems())
def test_min_cut_is_exact_without_budget(problem: Problem) -> None:
    assume(_feasible(problem))
    plan = CutGraph.build(problem).solve(problem)
    assert plan.violations(problem) == []
    best = brute_force(problem, math.inf)
    assert best is not None
    assert _close(plan.cost(problem), best.cost(problem))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(problems(), st.floats(0, 1))
def test_milp_is_exact_with_budget(problem: Problem, ratio: float) -> None:
    assume(_feasible(problem))
    low = CutGraph.build(problem).solve(problem, 1e9).size(problem)
    high = sum(it.size for it in problem.items)
    budget = low + ratio * (high - low)
    best = brute_force(problem, budget)
    assume(best is not None)
    solution = STRATEGIES["milp"].solve(problem, budget, time_limit=10)
    assert solution.plan.violations(problem) == []
    assert solution.plan.size(problem) <= budget
    assert _close(solution.plan.cost(problem), best.cost(problem))
    assert solution.optimal


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(problems(), st.floats(0, 1))
def test_every_strategy_returns_a_valid_plan(problem: Problem, ratio: float) -> None:
    assume(_feasible(problem))
    budget = ratio * sum(it.size for it in problem.items)
    for name, strategy in STRATEGIES.items():
        plan = strategy.solve(problem, budget, time_limit=5).plan
        assert plan.violations(problem) == [], name
        if strategy.honours_budget and brute_force(problem, budget) is not None:
            assert plan.size(problem) <= budget, name


def _chain() -> Problem:
    """x (input) -> gemm -> pointwise; backward needs both gemm and pointwise outputs."""
    return Problem(
        (
            Item("x", 0, 0.0, 0.0, (), True, False),
            Item("gemm", 100, 1.0, 50.0, (0,), True, True, kind="gemm"),
            Item("relu", 100, 1.0, 0.1, (1,), True, True, kind="pointwise"),
        ),
        frozenset({1, 2}),
    )


def test_fixed_policies_on_a_chain() -> None:
    problem = _chain()
    saved = {name: STRATEGIES[name].solve(problem, 0, time_limit=1).plan for name in STRATEGIES}
    assert saved["no_recompute"] == Plan(frozenset({1, 2}), frozenset())
    assert saved["recompute_all"] == Plan(frozenset({0}), frozenset({1, 2}))
    assert saved["selective"] == Plan(frozenset({1}), frozenset({2}))


def test_lagrangian_brackets_the_budget() -> None:
    problem = _chain()
    assert bracket(problem, 150).feasible == Plan(frozenset({1}), frozenset({2}))  # unbudgeted optimum fits
    result = bracket(problem, 50)
    assert result.feasible == Plan(frozenset({0}), frozenset({1, 2}))
    assert result.beyond == Plan(frozenset({1}), frozenset({2}))


def test_infeasible_problem_is_named() -> None:
    problem = Problem((Item("stuck", 4, 0.0, 0.0, (), False, False),), frozenset({0}))
    with pytest.raises(InfeasibleProblem, match="stuck"):
        check_feasible(problem)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(problems())
def test_hull_vertices_are_optimal_for_their_own_size(problem: Problem) -> None:
    assume(_feasible(problem))
    vertices = hull(problem)
    sizes = [v.size(problem) for v in vertices]
    costs = [v.cost(problem) for v in vertices]
    assert sizes == sorted(sizes) and costs == sorted(costs, reverse=True)
    for vertex in vertices:
        assert vertex.violations(problem) == []
        best = brute_force(problem, vertex.size(problem))
        assert best is not None and _close(vertex.cost(problem), best.cost(problem))


def test_selective_saves_the_cost_models_matrix_kinds() -> None:
    assert {kind.value for kind in MATRIX_KINDS} == COMPUTE_INTENSIVE
