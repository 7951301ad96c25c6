"""The peak MILP (``peak_milp``) against the walk it models (``JointSchedule.peak``).

Brute force: a pruned valid plan is fixed by what it saves (what it recomputes is then
the closure backward needs), so enumerating the saved sets of a problem restricted to a
dozen choices enumerates every plan worth having; on each, the model's peak must equal the
walk's, and at several caps the MILP's cost the cheapest fitting plan's.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import random
import time

import pytest
import torch

from recompute_pass import recompute_eager_backend
from recompute_pass.graph.costing import Costed, build_problem, resolve_device
from recompute_pass.memory.plan_peak import JointSchedule
from recompute_pass.realization import PlanNodes
from recompute_pass.search import peak_milp
from recompute_pass.search.peak_budget import choose_by_peak, segment_plans
from recompute_pass.search.peak_milp import PeakModel, PeakSolver
from recompute_pass.solver.frontier import Relaxation, hull
from recompute_pass.solver.problem import Plan, Problem
from tests.support.full_size import full_only
from tests.support.harness import assert_same_step, run_step
from tests.support.joint_graphs import analyzed, capture_joints, reference_joints
from tests.support.scorers import FakeScorer

FULL_ONLY = full_only("the zoo's blocks, 15-35 s each")
CHOICES = 10  # items free to be saved or recomputed in the brute force: 2**10 saved sets


class Chain(torch.nn.Module):
    """``(h @ w).sin()`` repeated, with a dropout after the second: chains of recomputable
    values, a replayed draw (generator state), a boolean mask, a multi-use weight."""

    def __init__(self, dim: int = 8, depth: int = 4, dropout: bool = True) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(dim, dim) / dim**0.5)
        self.depth, self.dropout = depth, dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for k in range(self.depth):
            h = (h @ self.w).sin() if self.dropout else (h @ self.w).relu()
            if k == 1 and self.dropout:
                h = torch.nn.functional.dropout(h, 0.5)
        return h.pow(2).mean()


@dataclasses.dataclass(frozen=True)
class Case:
    costed: Costed
    schedule: JointSchedule

    def walk(self, plan: Plan) -> int:
        nodes = PlanNodes.of(self.costed, plan)
        saved, states = set(nodes.saved), nodes.state_bytes(self.costed)
        return self.schedule.peak(saved, nodes.recomputed, states).peak_bytes

    def restricted(self, choices: int) -> Case:
        """Only ``choices`` items (spread over the graph) may be saved and recomputed both."""
        problem = self.costed.problem
        both = [i for i in sorted(problem.reach()) if _both(problem, i)]
        free = set(both[:: max(1, len(both) // choices)][:choices])
        keep = {i for i in range(len(problem)) if i in free or not problem.items[i].can_recompute}
        restricted = problem.restrict(can_save=keep)
        return Case(dataclasses.replace(self.costed, problem=restricted), self.schedule)


def _both(problem: Problem, i: int) -> bool:
    return problem.items[i].can_save and problem.items[i].can_recompute


@functools.cache
def _case(name: str) -> Case:
    if name == "chain":
        torch.manual_seed(0)
        (captured,) = capture_joints(Chain(), [torch.randn(4, 8)])
    elif name == "deep_chain":  # activations outweigh the weight: the peak trades against cost
        torch.manual_seed(0)
        (captured,) = capture_joints(Chain(16, 8, dropout=False), [torch.randn(32, 16)])
    else:
        (captured,) = reference_joints(name)
    joint = analyzed(captured)
    costed = build_problem(joint, resolve_device("cpu", joint))
    return Case(costed, JointSchedule.of(joint, costed.hints))


def _plan_saving(problem: Problem, saved: set[int]) -> Plan | None:
    """The pruned plan that saves ``saved`` (and what cannot be recomputed) and recomputes
    the rest backward needs; None when some needed value can be neither."""
    saved, recomputed = set(saved), set()
    stack = sorted(problem.needed)
    while stack:
        i = stack.pop()
        if i in saved or i in recomputed:
            continue
        item = problem.items[i]
        if item.can_recompute:
            recomputed.add(i)
            stack += item.inputs
        elif item.can_save:
            saved.add(i)
        else:
            return None
    plan = Plan(frozenset(saved), frozenset(recomputed)).pruned(problem)
    return None if plan.violations(problem) else plan


def _all_plans(problem: Problem) -> list[Plan]:
    free = [i for i in sorted(problem.reach()) if _both(problem, i)]
    plans = (
        _plan_saving(problem, set(chosen))
        for r in range(len(free) + 1)
        for chosen in itertools.combinations(free, r)
    )
    return list(dict.fromkeys(p for p in plans if p is not None))


@pytest.mark.parametrize("name", ["chain", "mlp"])
def test_model_peak_equals_the_walk_on_every_plan(name: str) -> None:
    case = _case(name).restricted(CHOICES)
    model = PeakModel.build(case.costed, case.schedule)
    plans = _all_plans(case.costed.problem)
    assert len(plans) > 100  # not vacuous (saved sets that prune alike are one plan)
    for plan in plans:
        assert model.peak(plan) == case.walk(plan)


@pytest.mark.parametrize(
    "name",
    [
        "chain",
        "deep_chain",
        "mlp",
        # The zoo's blocks (attention, dropout, norms, multi-output ops): 15-35 s each.
        *(pytest.param(name, marks=FULL_ONLY) for name in ("gpt_block", "llama_block", "cnn")),
    ],
)
def test_model_peak_equals_the_walk_on_random_plans(name: str) -> None:
    """Unrestricted: every item free, plans drawn at random (saved with probability 1/2)."""
    case = _case(name)
    problem = case.costed.problem
    model = PeakModel.build(case.costed, case.schedule)
    draw = random.Random(0)
    free = [i for i in sorted(problem.reach()) if _both(problem, i)]
    plans = {_plan_saving(problem, {i for i in free if draw.random() < 0.5}) for _ in range(150)}
    peaks = set()
    for plan in plans - {None}:
        assert plan is not None
        peaks.add(case.walk(plan))
        assert model.peak(plan) == case.walk(plan)
    assert len(plans) > 50 and (name == "mlp" or len(peaks) > 10)


def test_milp_optimum_equals_brute_force() -> None:
    case = _case("chain").restricted(CHOICES)
    problem = case.costed.problem
    model = PeakModel.build(case.costed, case.schedule)
    scored = [(case.walk(plan), plan.cost(problem)) for plan in _all_plans(problem)]
    peaks = sorted({peak for peak, _ in scored})
    caps = sorted({peaks[0], peaks[len(peaks) // 4], peaks[len(peaks) // 2], peaks[-1], peaks[0] - 1})
    for cap in caps:
        fitting = [cost for peak, cost in scored if peak <= cap]
        plan = model.solve(cap, time_limit=30)
        if not fitting:
            assert plan is None
            continue
        assert plan is not None and not plan.violations(problem)
        assert case.walk(plan) == model.peak(plan) <= cap
        assert plan.cost(problem) == pytest.approx(min(fitting), rel=1e-6)


def test_choose_by_peak_takes_a_cheaper_milp_plan_at_equal_peak() -> None:
    """On the deep chain, the MILP beats the family (hull and segment plans): at the
    family's lowest peak it finds a cheaper plan (a third cheaper), and budget 0 takes it."""
    case = _case("deep_chain")
    problem = case.costed.problem
    frontier = hull(Relaxation.of(problem), deadline=time.monotonic() + 30)
    family = [*frontier, *segment_plans(problem)]
    lowest = min(case.walk(p) for p in family)
    family_cost = min(p.cost(problem) for p in family if case.walk(p) == lowest)
    solver = PeakSolver.of(case.costed, case.schedule, time_limit=10)
    assert solver is not None

    def choose(peak_optimum: object) -> Plan:
        scorer = FakeScorer(case.walk, case.walk, optimum_of=peak_optimum)  # type: ignore[arg-type]
        deadline = time.monotonic() + 30
        return choose_by_peak(problem, frontier, scorer, ratio=0.0, cap=None, deadline=deadline).plan

    without, with_milp = choose(None), choose(solver.plans)
    assert case.walk(without) == case.walk(with_milp) == lowest
    assert without.cost(problem) == pytest.approx(family_cost)
    assert with_milp.cost(problem) < family_cost * (1 - 1e-6)


def test_partition_uses_the_milp_on_small_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end (no codegen): at peak budget 0 the deep chain's plan is cheaper with the
    MILP than without it, at no higher a predicted peak, with eager's gradients."""
    torch.manual_seed(0)
    model, inputs = Chain(16, 8, dropout=False), (torch.randn(32, 16),)
    eager = run_step(model, inputs)
    backend = recompute_eager_backend.with_options(memory_budget=0.0, budget_mode="peak", fallback=False)
    with_milp = run_step(model, inputs, backend=backend)
    monkeypatch.setattr(peak_milp, "MAX_CALLS", 0)
    without = run_step(model, inputs, backend=backend)
    assert_same_step(with_milp, eager)
    (fast,), (slow,) = with_milp.reports, without.reports
    assert fast.predicted_peak_bytes <= slow.predicted_peak_bytes
    assert fast.estimated_step_overhead < 0.9 * slow.estimated_step_overhead


def test_same_graph_same_model_and_plan() -> None:
    """Two captures of one model (other node objects, other hashes) give one model and plan."""
    models, plans = [], []
    for _ in range(2):
        torch.manual_seed(0)
        (captured,) = capture_joints(Chain(), [torch.randn(4, 8)])
        joint = analyzed(captured)
        costed = build_problem(joint, resolve_device("cpu", joint))
        model = PeakModel.build(costed, JointSchedule.of(joint, costed.hints))
        plan = model.solve(min(model.peak(p) for p in segment_plans(costed.problem)), time_limit=10)
        assert plan is not None
        models.append((model.rows, model.lower, model.upper))
        plans.append(plan)
    assert models[0] == models[1] and plans[0] == plans[1]
