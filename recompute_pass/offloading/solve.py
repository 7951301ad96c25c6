"""Keep, recompute or offload, in one solver.

Exact path: one MILP over all three choices (HiGHS through ``scipy.optimize.milp``).
Per relevant item ``a`` (available in backward) and ``r`` (recomputed), as in
``strategy_milp``; per offloadable item ``o`` (offloaded), with

- ``o <= a - r``: only a saved value is offloaded;
- ``sum size * (a - r - o) <= B``: the bytes that stay on the device fit ``B``;
- ``sum size * o <= host_bytes``;
- the link rows of ``OffloadProblem`` (forward and backward windows), linear in ``o``.

The objective is the recompute-only one (saved-tensor reads plus recompute time) plus a
tie-breaker per offload, so a transfer is made only when it buys memory that would
otherwise cost recomputation. Fast path (``greedy``): a given plan's saved values,
largest first, offloaded while the windows and the host cap allow: no new recomputation,
less device memory; it scales to any graph.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array

from recompute_pass.offloading.problem import OffloadProblem
from recompute_pass.solver.problem import Plan, Problem

log = logging.getLogger(__name__)

_GAP = 1e-6
_OFFLOAD_TIE = 1e-7  # objective units (costs normalised to the largest): prefer fewer transfers


def greedy(problem: Problem, plan: Plan, offload: OffloadProblem) -> Plan:
    """``plan`` with its saved values offloaded, largest first, while they fit
    (``offload``: the windows, best those of this plan, ``offload_schedule.for_order``)."""
    chosen: list[int] = []
    order = sorted((o for o in offload.items if o.item in plan.saved), key=lambda o: (-o.size, o.item))
    for item in order:
        if offload.fits([*chosen, item.item], plan.recomputed):
            chosen.append(item.item)
    return Plan(plan.saved, plan.recomputed, frozenset(chosen))


@dataclass(frozen=True)
class JointResult:
    plan: Plan | None
    optimal: bool
    status: str


def solve_joint(
    problem: Problem, offload: OffloadProblem, device_budget: float, *, time_limit: float
) -> JointResult:
    """The cheapest plan whose device-held saved bytes fit ``device_budget``."""
    items = problem.items
    relevant = tuple(sorted(problem.reach()))
    col = {item: k for k, item in enumerate(relevant)}
    n = len(relevant)
    offloadable = [o for o in offload.items if o.item in col]
    ocol = {o.item: 2 * n + m for m, o in enumerate(offloadable)}
    width = 2 * n + len(offloadable)
    save = np.array([items[i].save_cost for i in relevant])
    recompute = np.array([items[i].recompute_cost for i in relevant])
    size = np.array([items[i].size for i in relevant], dtype=np.float64)
    cost_scale = max(save.max(initial=0.0), recompute.max(initial=0.0), 1e-30)
    size_scale = max(size.max(initial=0.0), 1.0)
    objective = np.concatenate([save, recompute - save, np.full(len(offloadable), _OFFLOAD_TIE * cost_scale)])
    objective = objective / cost_scale

    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    upper: list[float] = []

    def row(entries: list[tuple[int, float]], bound: float) -> None:
        for c, v in entries:
            rows.append(len(upper))
            cols.append(c)
            vals.append(v)
        upper.append(bound)

    for k, i in enumerate(relevant):
        row([(n + k, 1.0), (k, -1.0)], 0.0)  # recomputed => available
        if not items[i].can_save:
            row([(k, 1.0), (n + k, -1.0)], 0.0)  # available => recomputed
        for j in items[i].inputs:
            row([(n + k, 1.0), (col[j], -1.0)], 0.0)  # recomputed => inputs available
    for o in offloadable:
        k = col[o.item]
        row([(ocol[o.item], 1.0), (k, -1.0), (n + k, 1.0)], 0.0)  # offloaded => saved
        for j in o.readers:  # offloaded => nothing recomputed from it
            if j in col:
                row([(ocol[o.item], 1.0), (n + col[j], 1.0)], 1.0)
    budget_row = [(k, s / size_scale) for k, s in enumerate(size)] + [
        (n + k, -s / size_scale) for k, s in enumerate(size)
    ]
    budget_row += [(ocol[o.item], -o.size / size_scale) for o in offloadable]
    row(budget_row, device_budget / size_scale)
    if offload.host_bytes is not None and offloadable:
        row([(ocol[o.item], o.size / size_scale) for o in offloadable], offload.host_bytes / size_scale)
    for members, seconds, field in [
        *((m, s, "d2h_seconds") for m, s in offload.forward_rows()),
        *((m, s, "h2d_seconds") for m, s in offload.backward_rows()),
    ]:
        present = [offload.by_item[i] for i in members if i in ocol]
        scale = max((getattr(o, field) for o in present), default=0.0)
        if present and scale > 0:
            row([(ocol[o.item], getattr(o, field) / scale) for o in present], seconds / scale)

    lower_bounds = np.zeros(width)
    upper_bounds = np.ones(width)
    for k, i in enumerate(relevant):
        if i in problem.needed:
            lower_bounds[k] = 1.0
        if not items[i].can_recompute:
            upper_bounds[n + k] = 0.0
    matrix = coo_array((vals, (rows, cols)), shape=(len(upper), width)).tocsr()
    result = milp(
        objective,
        integrality=np.ones(width),
        bounds=Bounds(lower_bounds, upper_bounds),
        constraints=LinearConstraint(matrix, -np.inf, np.asarray(upper)),
        options={"time_limit": max(time_limit, 0.05), "mip_rel_gap": _GAP, "presolve": True},
    )
    status = {0: "optimal", 1: "time limit", 2: "infeasible"}.get(result.status, str(result.status))
    if result.x is None:
        return JointResult(None, False, status)
    chosen = np.round(result.x).astype(bool)
    saved = frozenset(relevant[k] for k in range(n) if chosen[k] and not chosen[n + k])
    recomputed = frozenset(relevant[k] for k in range(n) if chosen[n + k])
    offloaded = frozenset(o.item for o in offloadable if chosen[ocol[o.item]]) & saved
    plan = Plan(saved, recomputed, offloaded).pruned(problem)
    if (
        plan.violations(problem)
        or offload.violations(plan.offloaded, plan.recomputed)
        or plan.device_size(problem) > device_budget
    ):
        return JointResult(None, False, f"{status}, rounded solution invalid")
    return JointResult(plan, result.status == 0, status)


def offload_family(
    problem: Problem,
    offload: OffloadProblem,
    plans: list[Plan],
    *,
    windows: Sequence[OffloadProblem],
    exact: bool,
    deadline: float,
    levels: int = 8,
) -> tuple[list[Plan], tuple[str, ...]]:
    """Plans with offload for the peak search: each given plan with its values offloaded
    greedily in its own windows (``windows``, one per plan; the fast path), and, when ``exact``, the
    joint MILP's plan at up to ``levels`` device budgets spanning the given plans' bytes."""
    start = time.monotonic()
    greedy_plans = (greedy(problem, plan, own) for plan, own in zip(plans, windows, strict=True))
    family = [p for p in dict.fromkeys(greedy_plans) if p.offloaded]
    notes: list[str] = []
    if exact and offload.items:
        sizes = sorted({plan.size(problem) for plan in plans})
        if len(sizes) > levels:
            sizes = [sizes[round(k * (len(sizes) - 1) / (levels - 1))] for k in range(levels)]
        solved = 0
        for budget in sizes:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                notes.append(f"offload MILP stopped by the time limit after {solved} levels")
                break
            result = solve_joint(problem, offload, budget, time_limit=remaining / 2)
            solved += 1
            if result.plan is not None and result.plan.offloaded:
                family.append(result.plan)
        log.debug("recompute_pass: offload MILP at %d levels in %.3fs", solved, time.monotonic() - start)
    return list(dict.fromkeys(family)), tuple(notes)
