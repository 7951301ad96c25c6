"""The solvers against brute force on random small problems, and on known structures."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from recompute_pass.search.peak_budget import segment_plans
from recompute_pass.solver.cut import CutGraph
from recompute_pass.solver.frontier import Relaxation, hull
from recompute_pass.solver.problem import Item, Plan, Problem
from recompute_pass.solver.strategies import STRATEGIES, InfeasibleProblem
from recompute_pass.solver.strategies.strategy_mincut import bracket
from recompute_pass.solver.strategies.strategy_sqrt_n import block_segments, segment_policy


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
        problem.check_feasible()
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
    solution = STRATEGIES["milp"].solve(Relaxation.of(problem), budget, time_limit=10)
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
        plan = strategy.solve(Relaxation.of(problem), budget, time_limit=5).plan
        assert plan.violations(problem) == [], name
        if strategy.honours_budget and brute_force(problem, budget) is not None:
            assert plan.size(problem) <= budget, name


def _chain() -> Problem:
    """x (input) -> gemm -> pointwise; backward needs both gemm and pointwise outputs."""
    return Problem(
        (
            Item("x", 0, 0.0, 0.0, (), True, False),
            Item("gemm", 100, 1.0, 50.0, (0,), True, True, is_matrix=True),
            Item("relu", 100, 1.0, 0.1, (1,), True, True),
        ),
        frozenset({1, 2}),
    )


def test_fixed_policies_on_a_chain() -> None:
    problem = _chain()
    relaxation = Relaxation.of(problem)
    saved = {name: STRATEGIES[name].solve(relaxation, 0, time_limit=1).plan for name in STRATEGIES}
    assert saved["no_recompute"] == Plan(frozenset({1, 2}), frozenset())
    assert saved["recompute_all"] == Plan(frozenset({0}), frozenset({1, 2}))
    assert saved["selective"] == Plan(frozenset({1}), frozenset({2}))


def test_lagrangian_brackets_the_budget() -> None:
    relaxation = Relaxation.of(_chain())
    # The unbudgeted optimum fits:
    assert bracket(relaxation, 150).feasible == Plan(frozenset({1}), frozenset({2}))
    result = bracket(relaxation, 50)
    assert result.feasible == Plan(frozenset({0}), frozenset({1, 2}))
    assert result.beyond == Plan(frozenset({1}), frozenset({2}))


def test_infeasible_problem_is_named() -> None:
    problem = Problem((Item("stuck", 4, 0.0, 0.0, (), False, False),), frozenset({0}))
    with pytest.raises(InfeasibleProblem, match="stuck"):
        problem.check_feasible()
    with pytest.raises(InfeasibleProblem, match="stuck"):
        Relaxation.of(problem)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(problems())
def test_hull_vertices_are_optimal_for_their_own_size(problem: Problem) -> None:
    assume(_feasible(problem))
    vertices = hull(Relaxation.of(problem))
    sizes = [v.size(problem) for v in vertices]
    costs = [v.cost(problem) for v in vertices]
    assert sizes == sorted(sizes) and costs == sorted(costs, reverse=True)
    for vertex in vertices:
        assert vertex.violations(problem) == []
        best = brute_force(problem, vertex.size(problem))
        assert best is not None and _close(vertex.cost(problem), best.cost(problem))


def test_hull_past_its_deadline_keeps_exact_ends() -> None:
    """Three independent values, each cheaper to save per byte than the next: four hull
    vertices. Out of time, the hull is its two ends, both still optimal for their size."""
    problem = Problem(
        (
            Item("x", 0, 0.0, 0.0, (), True, False),
            *(Item(f"v{k}", 10, 0.0, cost, (0,), True, True) for k, cost in enumerate((3.0, 2.0, 1.0))),
        ),
        frozenset({1, 2, 3}),
    )
    relaxation = Relaxation.of(problem)
    full = hull(relaxation)
    assert [v.size(problem) for v in full] == [0, 10, 20, 30]
    assert hull(relaxation, deadline=0.0) == (full[0], full[-1])


def test_selective_saves_what_a_matrix_op_computed_even_through_its_getitems() -> None:
    """An attention op returns a tuple (not savable); the tensors its getitems select are
    what it computed, so the policy saves them and recomputes only the cheap op after."""
    problem = Problem(
        (
            Item("x", 0, 0.0, 0.0, (), True, False),
            Item("attention", 0, 0.0, 50.0, (0,), False, True, is_matrix=True),
            Item("out", 100, 1.0, 0.0, (1,), True, True, selects_output=True),
            Item("logsumexp", 10, 1.0, 0.0, (1,), True, True, selects_output=True),
            Item("relu", 100, 1.0, 0.1, (2,), True, True),
            Item("chunk", 0, 0.0, 0.0, (4,), False, True, selects_output=True),  # a view's getitem
        ),
        frozenset({2, 3, 5}),
    )
    plan = STRATEGIES["selective"].solve(Relaxation.of(problem), 0, time_limit=1).plan
    assert plan == Plan(frozenset({2, 3}), frozenset({4, 5}))


def test_milp_tie_with_the_min_cut_plan_is_optimal_without_warning(caplog: pytest.LogCaptureFixture) -> None:
    """Issue #9: the budget falls between two hull vertices, and the smaller one (the
    min-cut incumbent, saving nothing) is already optimal. HiGHS proves it, returning a
    plan off the hull that ties (0.3 + (0.7 + 0.4) vs 0.7 + 0.3 + 0.4: equal up to float
    rounding). That is an optimal answer, not a failure to beat the incumbent."""
    problem = Problem(
        (
            Item("x", 0, 0.0, 0.0, (), True, False),
            Item("a", 16, 0.6, 0.7, (0,), True, True),
            Item("b", 8, 0.3, 0.3, (1,), True, True),
            Item("c", 24, 0.3, 0.4, (1,), True, True),
        ),
        frozenset({1, 2, 3}),
    )
    relaxation = Relaxation.of(problem)
    warm = bracket(relaxation, 8)
    assert warm.feasible == Plan(frozenset({0}), frozenset({1, 2, 3})) and warm.beyond is not None
    with caplog.at_level("DEBUG", logger="recompute_pass"):
        solution = STRATEGIES["milp"].solve(relaxation, 8, time_limit=10)
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == []
    assert solution.optimal
    assert solution.plan.violations(problem) == [] and solution.plan.size(problem) <= 8
    assert _close(solution.plan.cost(problem), brute_force(problem, 8).cost(problem))


def _blocked_chain(blocks: int, per_block: int, head: int = 0) -> Problem:
    """A chain of ``blocks`` blocks of ``per_block`` forward values each (an embedding
    outside them first, ``head`` values outside them last), and one backward value reading
    each forward value, as a transformer's gradient reads each layer's activations."""
    items = [Item("embed", 64, 1e-6, 1e-6, (), can_save=True, can_recompute=True)]
    for b in range(blocks):
        for k in range(per_block):
            i = len(items)
            items.append(Item(f"b{b}.{k}", 64, 1e-6, 1e-3, (i - 1,), True, True, block=b))
    for k in range(head):
        items.append(Item(f"head{k}", 64, 1e-6, 1e-3, (len(items) - 1,), True, True))
    forward = len(items)
    for i in range(1, forward):
        items.append(Item(f"grad{i}", 64, 1e-6, 1e-6, (i,), False, True, is_forward=False))
    return Problem(tuple(items), frozenset(range(forward, len(items))))


def test_block_segments_cut_the_forward_at_its_blocks() -> None:
    problem = _blocked_chain(blocks=3, per_block=4)
    backward = [-1] * 12  # in no segment: what backward reads makes nothing cross
    assert block_segments(problem, 1.0) == [0, *[0] * 4, *[1] * 4, *[2] * 4, *backward]
    assert block_segments(problem, 2.0)[1:13] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert block_segments(problem, 0.5)[1:13] == [0] * 8 + [1] * 4
    one = Problem(
        tuple(dataclasses.replace(it, block=min(it.block, 0)) for it in problem.items), problem.needed
    )
    assert block_segments(one, 1.0) is None


def _blocks_sharing_a_mask(
    source_size: int, *, source_fuses: bool = False, readers_fuse: bool = False, blocks: int = 3
) -> Problem:
    """A chain of blocks that all read one large mask, built before the first by a fusible
    op from a small position value (HF's float attention mask and its indices), read by
    a kernel that needs it as a buffer (attention) unless ``readers_fuse``."""
    items = [
        Item("embed", 64, 1e-6, 1e-6, (), can_save=True, can_recompute=True),
        Item("positions", source_size, 1e-6, 1e-4, (), True, True, fuses=source_fuses),
        Item("mask", 1024, 1e-6, 1e-4, (1,), True, True, fuses=True, block=0),
    ]
    for b in range(blocks):
        for k in range(2):
            i = len(items)
            inputs = ((i - 1, 2) if i > 3 else (0, 2)) if k == 0 else (i - 1,)
            fuses = readers_fuse and k == 0
            items.append(Item(f"b{b}.{k}", 64, 1e-6, 1e-3, inputs, True, True, fuses=fuses, block=b))
    forward = len(items)
    for i in (2, *range(3, forward)):  # backward reads the mask and every block value
        fuses = readers_fuse and i == 2
        items.append(Item(f"grad{i}", 64, 1e-6, 1e-6, (i,), False, True, is_forward=False, fuses=fuses))
    return Problem(tuple(items), frozenset(range(forward, len(items))))


def test_block_plans_save_a_shared_masks_small_sources_instead_of_the_mask() -> None:
    """Recomputed from its saved sources, the mask is rebuilt before each block's use in
    backward (``extract.rebuild``) instead of being held throughout."""
    problem = _blocks_sharing_a_mask(source_size=8)
    names = [it.name for it in problem.items]
    cut = block_segments(problem, 1.0)
    _, must_not_save = segment_policy(problem, segment=cut, blocks=True)
    assert names.index("mask") in must_not_save and names.index("positions") not in must_not_save
    _, at_any_cut = segment_policy(problem, segment=cut)
    assert names.index("mask") not in at_any_cut  # cuts of equal bytes keep the old rule
    saved = [{names[i] for i in plan.saved} for plan in segment_plans(problem)]
    assert any("positions" in plan and "mask" not in plan for plan in saved), saved


def test_a_mask_from_large_or_cheap_sources_stays_saveable() -> None:
    names = [it.name for it in _blocks_sharing_a_mask(source_size=8).items]
    cases = {
        "sources an eighth of the mask or more": (_blocks_sharing_a_mask(256), False),
        "read inside fused kernels only": (_blocks_sharing_a_mask(8, readers_fuse=True), False),
        # A fusible source with no inputs is a constructor, part of the chain: the mask is
        # then rebuilt from nothing.
        "built from constructors alone": (_blocks_sharing_a_mask(8, source_fuses=True), True),
    }
    for case, (problem, recomputed) in cases.items():
        _, must_not_save = segment_policy(problem, segment=block_segments(problem, 1.0), blocks=True)
        assert (names.index("mask") in must_not_save) == recomputed, case


def test_the_smallest_per_block_plan_saves_block_outputs_only() -> None:
    """Like per-block checkpointing: each block's output crosses into the next and is
    saved; what backward reads inside a block is rebuilt from the block's input."""
    problem = _blocked_chain(blocks=3, per_block=4)
    saved = [frozenset(problem.items[i].name for i in plan.saved) for plan in segment_plans(problem)]
    assert frozenset({"b0.3", "b1.3"}) in saved  # the embedding, from no input, is rebuilt


def test_the_head_after_the_last_block_may_be_a_segment_of_its_own() -> None:
    """A language model's head (norm, logits, loss) after the last block: joined to the
    last block's segment, backward rebuilds that block before the loss's backward and holds
    it beside the logits; apart, as under per-block checkpointing, the last block's output
    is saved. The family has both."""
    problem = _blocked_chain(blocks=3, per_block=4, head=2)
    head = slice(13, 15)
    assert block_segments(problem, 1.0)[head] == [2, 2]
    assert block_segments(problem, 1.0, head_apart=True)[head] == [3, 3]
    assert block_segments(problem, 2.0, head_apart=True)[head] == [6, 6]
    assert block_segments(problem, 1.0, head_apart=True)[:13] == block_segments(problem, 1.0)[:13]
    saved = [frozenset(problem.items[i].name for i in plan.saved) for plan in segment_plans(problem)]
    assert frozenset({"b0.3", "b1.3"}) in saved
    assert frozenset({"b0.3", "b1.3", "b2.3"}) in saved
