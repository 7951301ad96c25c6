"""Offload plans for the peak search, and the three-way trade-off they trace.

A peak budget chooses the cheapest plan of a family whose predicted peak fits
(``peak_budget``). With offload the family grows by plans that hold some saved values in
host memory: solver ``milp``, the joint MILP's plans at several device budgets (exact,
``offload_solve.solve_joint``) plus the fast path; solver ``mincut``, the fast path only
(each recompute-only plan of the family with values offloaded greedily). A plan that
offloads saves more for the same peak, so the choice at a budget recomputes less.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from recompute_pass.offloading.problem import OffloadProblem
from recompute_pass.offloading.solve import offload_family
from recompute_pass.options import RecomputeOptions
from recompute_pass.search.peak_budget import segment_plans
from recompute_pass.search.scorer import PlanScorer
from recompute_pass.solver.problem import Plan, Problem

# Share of the time left that the offload MILP may use; the peak search needs the rest.
_MILP_SHARE = 0.5


@dataclass
class OffloadSearch:
    plans: tuple[Plan, ...]
    notes: tuple[str, ...]
    estimates: dict[Plan, int] = field(default_factory=dict)
    exact: dict[Plan, int] = field(default_factory=dict)

    @staticmethod
    def of(
        problem: Problem,
        frontier: tuple[Plan, ...],
        scorer: PlanScorer,
        options: RecomputeOptions,
        deadline: float,
    ) -> OffloadSearch:
        """``scorer.offload``: the windows (None: no host link); ``scorer.windows``, a plan's own."""
        offload = scorer.offload
        if offload is None:
            return OffloadSearch((), ("offload: the device profile has no host link; nothing offloaded",))
        if not offload.items:
            return OffloadSearch((), ("offload: no saved value large enough to offload",))
        base = list(dict.fromkeys([*frontier, *segment_plans(problem)]))
        budget = time.monotonic() + max(deadline - time.monotonic(), 0.0) * _MILP_SHARE
        plans, notes = offload_family(
            problem,
            offload,
            base,
            windows=[scorer.windows(plan) for plan in base],
            exact=options.solver == "milp",
            deadline=budget,
        )
        return OffloadSearch(tuple(plans), (f"offload: {len(plans)} plans with offload searched", *notes))

    def recording(self, scorer: PlanScorer) -> PlanScorer:
        """``scorer``, remembering every plan's peak for the frontier."""
        return _Recording(scorer, self)

    def frontier(self, problem: Problem) -> tuple[tuple[int, float, int], ...]:
        """(peak, estimated overhead, offloaded bytes) that no other scored plan beats on
        all three, lowest peak first; exact peaks where known."""
        points = {
            (peak, plan.cost(problem), sum(problem.items[i].size for i in plan.offloaded))
            for plan, peak in {**self.estimates, **self.exact}.items()  # exact peaks win
        }
        kept = [
            p
            for p in points
            if not any(q != p and all(a <= b for a, b in zip(q, p, strict=True)) for q in points)
        ]
        return tuple(sorted(kept))


@dataclass
class _Recording:
    """A ``PlanScorer`` that records the peaks it gives in an ``OffloadSearch``."""

    scorer: PlanScorer
    search: OffloadSearch

    @property
    def checks(self) -> int:
        return self.scorer.checks

    @property
    def offload(self) -> OffloadProblem | None:
        return self.scorer.offload

    def estimate(self, plan: Plan) -> int:
        self.search.estimates[plan] = self.scorer.estimate(plan)
        return self.search.estimates[plan]

    def exact(self, plan: Plan) -> int:
        self.search.exact[plan] = self.scorer.exact(plan)
        return self.search.exact[plan]

    def lower_bound(self, plan: Plan, over: int | None = None) -> int:
        return self.scorer.lower_bound(plan, over)

    def windows(self, plan: Plan) -> OffloadProblem:
        return self.scorer.windows(plan)

    def optimum(self, caps: Callable[[], Sequence[int]], deadline: float) -> list[Plan]:
        return self.scorer.optimum(caps, deadline)
