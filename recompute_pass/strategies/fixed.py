"""What the fixed policies share: solve a restricted problem exactly, ignoring the budget."""

from __future__ import annotations

from collections.abc import Set

from recompute_pass.problem import Problem
from recompute_pass.strategies.base import Solution
from recompute_pass.strategies.cut import CutGraph, check_feasible


def rebuildable(problem: Problem, may_recompute: Set[int]) -> set[int]:
    """Items backward can rebuild by recomputing only ``may_recompute`` items from saved ones.

    An item whose recomputation needs a value that can be neither rebuilt nor saved (the
    tensor of a random multi-output op, say) is not rebuildable, and policies must let it
    be saved. Items come in graph order, so inputs are decided before their users.
    """
    items = problem.items
    result: set[int] = set()
    for i, item in enumerate(items):
        if (
            i in may_recompute
            and item.can_recompute
            and all(j in result or items[j].can_save for j in item.inputs)
        ):
            result.add(i)
    return result


def solve_policy(problem: Problem, may_recompute: Set[int], must_not_save: Set[int], policy: str) -> Solution:
    """Cheapest plan recomputing only ``may_recompute`` and saving nothing in
    ``must_not_save`` that backward could rebuild; the budget is reported, not enforced."""
    rebuilt = rebuildable(problem, may_recompute)
    restricted = problem.restrict(
        can_save={i for i in range(len(problem)) if i not in must_not_save or i not in rebuilt},
        can_recompute=set(may_recompute),
    )
    check_feasible(restricted)
    plan = CutGraph.build(restricted).solve(restricted)
    return Solution(plan, optimal=False, notes=(f"fixed policy: {policy}; budget not enforced",))
