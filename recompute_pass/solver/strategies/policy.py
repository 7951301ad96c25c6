"""What the policies share (``strategy_fixed``, ``strategy_sqrt_n``, the peak search's
segments): a problem restricted by a rule, solved exactly, ignoring the budget."""

from __future__ import annotations

from collections.abc import Set

from recompute_pass.solver.cut import CutGraph
from recompute_pass.solver.problem import Problem
from recompute_pass.solver.strategies.base import Solution


def policy_problem(problem: Problem, may_recompute: Set[int], must_not_save: Set[int]) -> Problem:
    """``problem`` recomputing only ``may_recompute`` and saving nothing in ``must_not_save``
    that backward could rebuild that way.

    What backward cannot rebuild (a value downstream of a random multi-output op's tensor,
    say) stays savable, so a policy never makes the problem infeasible.
    """
    limited = problem.restrict(can_recompute=set(may_recompute))
    rebuilt = limited.rebuildable
    restricted = limited.restrict(
        can_save={i for i in range(len(problem)) if i not in must_not_save or i not in rebuilt}
    )
    restricted.check_feasible()
    return restricted


def solve_policy(problem: Problem, may_recompute: Set[int], must_not_save: Set[int], policy: str) -> Solution:
    """Cheapest plan of ``policy_problem``; the budget is reported, not enforced."""
    restricted = policy_problem(problem, may_recompute, must_not_save)
    plan = CutGraph.build(restricted).solve(restricted)
    return Solution(plan, optimal=False, notes=(f"fixed policy: {policy}; budget not enforced",))
