"""A ``PlanScorer`` for tests: peaks from plain functions or tables, and a log of what the
peak search asked (which plans it estimated, which it checked exactly)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from recompute_pass.offloading.problem import OffloadProblem
from recompute_pass.search.peak_budget import MAX_CHECKED
from recompute_pass.solver.problem import Plan


@dataclass
class FakeScorer:
    estimate_of: Callable[[Plan], int]
    exact_of: Callable[[Plan], int]
    checks: int = MAX_CHECKED
    offload: OffloadProblem | None = None
    optimum_of: Callable[[Sequence[int], float], list[Plan]] | None = None
    lower_bound_of: Callable[[Plan], int] = lambda plan: 0
    bound_of: Callable[[Plan], int] | None = None  # the lower bound when asked to beat a peak
    estimated: list[Plan] = field(default_factory=list)
    checked: list[Plan] = field(default_factory=list)
    bounded: list[Plan] = field(default_factory=list)

    def estimate(self, plan: Plan) -> int:
        self.estimated.append(plan)
        return self.estimate_of(plan)

    def exact(self, plan: Plan) -> int:
        self.checked.append(plan)
        return self.exact_of(plan)

    def lower_bound(self, plan: Plan, over: int | None = None) -> int:
        if over is None or self.bound_of is None or self.lower_bound_of(plan) > over:
            return self.lower_bound_of(plan)
        self.bounded.append(plan)
        return self.bound_of(plan)

    def windows(self, plan: Plan) -> OffloadProblem:
        raise AssertionError("no offload in this scorer")

    def optimum(self, caps: Callable[[], Sequence[int]], deadline: float) -> list[Plan]:
        return [] if self.optimum_of is None else self.optimum_of(caps(), deadline)
