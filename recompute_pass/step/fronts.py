"""Each graph's front of plans, as the step sees them (``PlanMemory``).

A graph alone is judged by its own peak; in a step it is judged by three things: what it
holds while the other graphs run (its saved bytes, from its forward's end to its
backward), and how far its own forward and backward rise above the level they start at.
A plan that is poor alone may be the step's best: saving only the block's input, as
per-block checkpointing does, holds least while eleven other blocks run.

So the family the peak search draws from (the saved-bytes hull and the segment plans,
``search.peak_budget``) is scored by the fast estimate of each plan's timeline, the plans
no other beats on all of cost, held bytes, forward rise and backward rise are kept, and at
most ``MAX_EXACT`` of them, spread over their cost, get an exact timeline (Inductor's
memory plan under ``torch.compile``, the graphs walked without codegen: the same
predictors as a single graph's). Which plans these are does not depend on the budget.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from torch import fx

from recompute_pass import torch_internals as ti
from recompute_pass.memory.liveness import PeakEstimate, storage_base
from recompute_pass.partitioner import Priced, indexed_plan, joint_digest
from recompute_pass.realization import PlanNodes
from recompute_pass.search.peak_budget import segment_plans
from recompute_pass.solver.frontier import Relaxation, hull
from recompute_pass.solver.problem import Plan
from recompute_pass.step.recording import PlanMemory

log = logging.getLogger(__name__)

# A plan a graph's compiled code runs: its joint graph's digest, the items saved and recomputed.
RunningPlan = tuple[str, tuple[int, ...], tuple[int, ...]]

# Plans of a graph whose exact timeline is predicted for the step (each one an Inductor
# lowering under torch.compile, or a composition of its blocks' on a deep graph).
MAX_EXACT = 8


@dataclass(frozen=True)
class FrontPlan:
    memory: PlanMemory
    saved: tuple[int, ...]  # item indices of the graph's problem (``partitioner.FixedPlan``)
    recomputed: tuple[int, ...]
    own_peak: int  # the graph's own predicted peak under this plan, alone
    recompute_flops: int


@dataclass(frozen=True)
class GraphFront:
    plans: tuple[FrontPlan, ...]
    graph: str  # the joint graph's digest (``partitioner.joint_digest``)
    searched: int  # plans of the family estimated
    seconds: float
    current: int | None = None  # the plan its compiled graphs run already, if any

    def memories(self) -> tuple[PlanMemory, ...]:
        return tuple(p.memory for p in self.plans)


def plan_memory(estimate: PeakEstimate, *, cost: float, saved: Boundaries, exact: bool) -> PlanMemory:
    """A plan's timeline (from the start of its forward, inputs not counted) as the step
    needs it: the forward's highest level, what the forward leaves held beyond the outputs
    the caller takes, and the backward's highest level above its start."""
    timeline = estimate.timeline
    phases = [phase for phase, _, _ in timeline]
    first_backward = phases.index("backward") if "backward" in phases else len(phases)
    last_forward = max((i for i, phase in enumerate(phases) if phase == "forward"), default=-1)
    forward_peak = max((live for _, _, live in timeline[:first_backward]), default=0)
    start = estimate.forward_end + estimate.tangent_bytes
    backward_peak = max([start, *(live for _, _, live in timeline[last_forward + 1 :])]) - start
    return PlanMemory(
        cost=cost,
        forward_peak=max(0, forward_peak),
        held=estimate.forward_end - estimate.caller_bytes,
        backward_peak=backward_peak,
        saved_inputs=saved.inputs,
        saved_outputs=saved.outputs,
        outputs=saved.count,
        exact=exact,
    )


def front(priced: Priced, current: RunningPlan | None = None) -> GraphFront:
    """The graph's plans for the step (see the module docstring). ``current``: the plan its
    compiled graphs run already (a ``ValueError`` if it is not this graph's); it joins the
    front, so that keeping it is a choice (``GraphFront.current``)."""
    start = time.perf_counter()
    costed = priced.costed
    problem = costed.problem
    scorer = priced.scorer({})
    frontier = hull(Relaxation.of(problem), deadline=time.monotonic() + priced.options.time_limit)
    family = list(dict.fromkeys([frontier[-1], *reversed(frontier[:-1]), *segment_plans(problem)]))
    running = indexed_plan(costed, *current) if current is not None else None
    joint = costed.joint
    primals = [n for n in joint.module.graph.nodes if ti.is_primal(n)]
    (output,) = joint.module.graph.find_nodes(op="output")
    users = list(output.args[0][: joint.num_fwd_outputs])
    everything = [*family, running] if running is not None and running not in family else family
    saved = {plan: Boundaries.of(PlanNodes.of(costed, plan).saved, primals, users) for plan in everything}

    def memory_of(plan: Plan, estimate: PeakEstimate, exact: bool) -> PlanMemory:
        return plan_memory(estimate, cost=plan.cost(problem), saved=saved[plan], exact=exact)

    estimated = {plan: memory_of(plan, scorer.estimated(plan), scorer.walked) for plan in everything}
    chosen = select({p: estimated[p] for p in family}, MAX_EXACT)
    if running is not None and running not in chosen:
        chosen.append(running)
    plans = []
    for plan in chosen:
        if scorer.walked:
            memory, own = estimated[plan], scorer.estimate(plan)
        else:
            peak = scorer.realize(plan)[1]
            memory, own = memory_of(plan, peak, True), peak.peak_bytes
        plans.append(
            FrontPlan(
                memory=memory,
                saved=tuple(sorted(plan.saved)),
                recomputed=tuple(sorted(plan.recomputed)),
                own_peak=own,
                recompute_flops=sum(costed.flops[i] for i in plan.recomputed if i < len(costed.flops)),
            )
        )
    index = chosen.index(running) if running is not None else None
    return GraphFront(tuple(plans), joint_digest(costed), len(family), time.perf_counter() - start, index)


def select(estimated: dict[Plan, PlanMemory], limit: int) -> list[Plan]:
    """The plans no other beats on cost, held bytes and both rises, at most ``limit``:
    the fastest and the most frugal always, the rest spread evenly over their cost."""
    plans = list(estimated)

    def measures(plan: Plan) -> tuple[float, int, int, int]:
        m = estimated[plan]
        return (m.cost, m.held, m.forward_peak, m.backward_peak)

    front = [p for p in plans if not any(_beats(measures(q), measures(p)) for q in plans)]
    front.sort(key=lambda p: (*measures(p), plans.index(p)))
    fastest = front[0]
    frugal = min(front, key=lambda p: (estimated[p].held, max(measures(p)[2:]), plans.index(p)))
    rest = [p for p in front if p not in (fastest, frugal)]
    room = max(0, limit - 2)
    if len(rest) > room:
        step = len(rest) / room if room else 0
        rest = [rest[int(i * step)] for i in range(room)]
    return list(dict.fromkeys([fastest, frugal, *rest]))


def _beats(a: Sequence[float], b: Sequence[float]) -> bool:
    return all(x <= y for x, y in zip(a, b, strict=True)) and any(x < y for x, y in zip(a, b, strict=True))


@dataclass(frozen=True)
class Boundaries:
    """Which of a graph's inputs and user outputs a plan keeps the storage of."""

    inputs: frozenset[int]
    outputs: frozenset[int]
    count: int  # user outputs

    @staticmethod
    def of(saved: Iterable[fx.Node], inputs: Sequence[fx.Node], outputs: Sequence[object]) -> Boundaries:
        """``saved``: the values the plan saves; ``inputs``: the graph's inputs in order;
        ``outputs``: its user outputs in order (through views both ways)."""
        bases = {storage_base(node) for node in saved}
        return Boundaries(
            inputs=frozenset(i for i, node in enumerate(inputs) if node in bases),
            outputs=frozenset(
                k
                for k, value in enumerate(outputs)
                if isinstance(value, fx.Node) and storage_base(value) in bases
            ),
            count=len(outputs),
        )
