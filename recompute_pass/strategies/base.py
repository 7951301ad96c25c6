"""The one interface every strategy implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from recompute_pass.problem import Plan, Problem


class InfeasibleProblem(ValueError):
    """Some needed value can be neither saved nor recomputed."""


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

    def solve(self, problem: Problem, budget: float, *, time_limit: float) -> Solution:
        """The cheapest plan saving at most ``budget`` bytes, or the policy's plan."""
        ...
