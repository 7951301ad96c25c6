"""What the peak search asks of a plan: its peak, fast and exact, and its offload windows.

One object answers for one joint graph (``realization.JointScorer``: the graph walk for the
estimate, the extracted graphs or Inductor's memory plan for the exact peak, the offload
schedule for the windows, ``peak_milp`` for the optimum), so that a new way of predicting
a peak is a new implementation, not one more callable threaded through ``decide`` and
``peak_budget.choose_by_peak``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from recompute_pass.offloading.problem import OffloadProblem
from recompute_pass.solver.problem import Plan


class PlanScorer(Protocol):
    """``checks``: how many plans' exact peaks the search may ask for (a count, not a clock,
    so that the plan does not depend on the machine). ``offload``: the offload windows in
    the joint graph's order, None without offload (not asked for, or no host link)."""

    checks: int
    offload: OffloadProblem | None

    def estimate(self, plan: Plan) -> int:
        """The plan's predicted peak, fast: used to rank plans and choose which to check."""
        ...

    def exact(self, plan: Plan) -> int:
        """The peak the report will say; asked for at most ``checks`` plans (plus the optimum's)."""
        ...

    def lower_bound(self, plan: Plan, over: int | None = None) -> int:
        """A bound below ``exact(plan)``, fast (0: none): the search does not check a plan
        whose lower bound already rules it out. With ``over`` (what the plan must not exceed to
        matter), the scorer may spend a fraction of a check to push the bound over it."""
        ...

    def windows(self, plan: Plan) -> OffloadProblem:
        """The offload windows in this plan's own backward order (only asked with ``offload``)."""
        ...

    def optimum(self, caps: Callable[[], Sequence[int]], deadline: float) -> list[Plan]:
        """The cheapest plans at the estimated peaks ``caps()`` gives (``peak_milp``; none
        on large graphs, where ``caps`` is not called: estimating a deep plan takes time)."""
        ...
