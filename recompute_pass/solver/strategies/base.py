"""The one interface every strategy implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from recompute_pass.solver.frontier import Relaxation
from recompute_pass.solver.problem import Plan


@dataclass(frozen=True)
class Solution:
    plan: Plan
    # True when the plan is proven optimal for the budget it was asked (fixed policies
    # are optimal within their own restriction, which they say in ``notes``).
    optimal: bool
    notes: tuple[str, ...] = ()


class Strategy(Protocol):
    name: str
    # Whether the strategy honours the byte budget; fixed policies do not (they exist to
    # be compared against), and the report says when their plan exceeds it.
    honours_budget: bool

    def solve(self, relaxation: Relaxation, budget: float, *, time_limit: float) -> Solution:
        """The cheapest plan for ``relaxation.problem`` saving at most ``budget`` bytes, or
        the policy's plan. The relaxation is built once per graph (``Relaxation.of``), so
        its feasibility check, cut network and ends are shared with the frontier."""
        ...
