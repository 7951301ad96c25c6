"""A plan made real: its forward and backward graphs and their predicted peak, and the
peak search's scorer, which realises the plans it is asked to check.

The pipeline (``partitioner.partition``) realises the plan it chose; the peak search
(``search.peak_budget``) scores many plans through ``JointScorer`` before choosing, each
plan realised at most once (``JointScorer.realized`` is shared with the pipeline).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from torch import fx

from cost_model import SizeHints
from recompute_pass import torch_internals as ti
from recompute_pass.extract.extraction import Partition, extract
from recompute_pass.extract.offload import offload_partition
from recompute_pass.extract.rebuild import rebuild_at_each_use
from recompute_pass.extract.scale import hoist_scales
from recompute_pass.extract.sums import store_sums
from recompute_pass.graph.costing import Costed
from recompute_pass.graph.plan_sizes import planned_hints
from recompute_pass.memory import composed, inductor_memory, liveness
from recompute_pass.memory.liveness import PeakEstimate
from recompute_pass.memory.plan_peak import JointSchedule
from recompute_pass.offloading.peak import with_offload
from recompute_pass.offloading.problem import OffloadProblem
from recompute_pass.offloading.schedule import for_order, windows
from recompute_pass.options import RecomputeOptions
from recompute_pass.search.peak_budget import COMPOSED_CHECKS, checks_within
from recompute_pass.search.peak_milp import PeakSolver
from recompute_pass.solver.problem import Plan

log = logging.getLogger(__name__)


# At most this many pieces not lowered before are lowered to bound a plan's peak
# (``JointScorer.lower_bound``); past them the plan is checked whole.
BOUND_LOWERINGS = 2


@dataclass(frozen=True)
class PlanNodes:
    """A plan in the joint graph's nodes."""

    saved: tuple[fx.Node, ...]  # in item order
    recomputed: frozenset[fx.Node]
    states: tuple[int, ...]  # generator-state items saved, each replaying one draw
    replayed: tuple[fx.Node, ...]  # those draws

    @staticmethod
    def of(costed: Costed, plan: Plan) -> PlanNodes:
        candidates = costed.joint.candidates
        states = tuple(sorted(plan.saved & costed.rng_states.keys()))
        return PlanNodes(
            saved=tuple(candidates[i].node for i in sorted(plan.saved) if i < len(candidates)),
            recomputed=frozenset(candidates[i].node for i in plan.recomputed),
            states=states,
            replayed=tuple(candidates[costed.rng_states[i]].node for i in states),
        )

    def state_bytes(self, costed: Costed) -> dict[str, int]:
        items = costed.problem.items
        return {node.name: items[i].size for i, node in zip(self.states, self.replayed, strict=True)}


@dataclass(frozen=True)
class JointScorer:
    """The peak search's ``PlanScorer`` for one joint graph: the estimate walks the joint
    graph in the plan's backward order (``plan_peak``, offloaded bytes off the device);
    the exact peak is the extracted graphs' (or Inductor's memory plan, when ``inductor``),
    or, when ``walked``, the walk itself.

    ``walked``: without Inductor or offload the graphs run as extracted, which the walk
    replays exactly (tests/eager/test_liveness.py): the search then extracts no plan and checks
    every plan of the front. Otherwise exact peaks are checked for as many plans as the
    time limit is expected to allow (``peak_budget.checks_within``): a count, so that the
    plan does not depend on the machine's speed."""

    costed: Costed
    schedule: JointSchedule
    offload: OffloadProblem | None  # the windows, with offload (None: not asked, or no host link)
    checks: int
    walked: bool
    inductor: bool
    time_limit: float
    plan_sizes: dict[str, int]
    realized: dict[Plan, tuple[Partition, PeakEstimate]]  # shared: each plan predicted once
    graph_nodes: dict[str, fx.Node]  # by name, for offload's transfer times
    planner: composed.PieceLowerings | None = None  # peaks composed from the graph's pieces
    extracted: dict[Plan, tuple[Partition, SizeHints]] = dataclasses.field(default_factory=dict)

    @staticmethod
    def of(
        costed: Costed,
        options: RecomputeOptions,
        *,
        inductor: bool,
        plan_sizes: dict[str, int],
        realized: dict[Plan, tuple[Partition, PeakEstimate]],
        planner: composed.PieceLowerings | None = None,
    ) -> JointScorer:
        joint = costed.joint
        # Offload: the windows of each value that may be offloaded (None: no host link).
        offload = windows(costed, options.offload_host_bytes) if options.offload else None
        walked = not inductor and not options.offload
        counted = checks_within(options.time_limit, len(joint.module.graph.nodes))
        if planner is not None:  # a check lowers only the pieces not lowered before
            counted = COMPOSED_CHECKS
        return JointScorer(
            costed=costed,
            schedule=JointSchedule.of(joint, costed.hints),
            offload=offload,
            checks=sys.maxsize if walked else counted,
            walked=walked,
            inductor=inductor,
            time_limit=options.time_limit,
            plan_sizes=plan_sizes,
            realized=realized,
            graph_nodes={n.name: n for n in joint.module.graph.nodes} if offload is not None else {},
            planner=planner,
        )

    def on_graphs(self) -> JointScorer:
        """The same scorer with exact peaks from the extracted graphs, for the counted checks."""
        checks = checks_within(self.time_limit, len(self.costed.joint.module.graph.nodes))
        return dataclasses.replace(self, walked=False, checks=checks)

    def estimate(self, plan: Plan) -> int:
        return self.estimated(plan).peak_bytes

    def estimated(self, plan: Plan) -> PeakEstimate:
        """The fast estimate's whole timeline (``estimate`` is its peak)."""
        costed = self.costed
        nodes = PlanNodes.of(costed, plan)
        estimate = self.schedule.peak(set(nodes.saved), nodes.recomputed, nodes.state_bytes(costed))
        if plan.offloaded:
            off = {costed.joint.candidates[i].node: costed.problem.items[i].size for i in plan.offloaded}
            estimate = with_offload(estimate, off, self.graph_nodes, costed.device, costed.hints)
        return estimate

    def exact(self, plan: Plan) -> int:
        return self.estimate(plan) if self.walked else self.realize(plan)[1].peak_bytes

    def lower_bound(self, plan: Plan, over: int | None = None) -> int:
        """The bytes the plan saves on the device: the forward's outputs, all allocated when
        it ends (a view is never saved, ``joint_graph``; a saved input costs nothing). 0 when
        walked, where a check costs no more than this.

        With ``over``, where those bytes are not over it and the peak is composed from
        pieces: the composed peak with at most ``BOUND_LOWERINGS`` new pieces lowered, the
        backward's first, and the others bounded (``PieceLowerings.plan_graph``). A plan
        whose peak is early in its backward (the top block's attention, the head) is then
        ruled out for an extraction and a lowering or two, not all of its new pieces."""
        if self.walked:
            return 0
        candidates, items = self.costed.joint.candidates, self.costed.problem.items
        saved = sum(
            items[i].size
            for i in plan.saved - plan.offloaded
            if i < len(candidates) and candidates[i].node.op != "placeholder"
        )
        if over is None or saved > over or self.planner is None or plan.offloaded:
            return saved
        if plan in self.realized:
            return self.realized[plan][1].peak_bytes
        result, hints = self.extract(plan)
        users = self.costed.joint.num_fwd_outputs
        bound = saved
        for lowerings in range(BOUND_LOWERINGS + 1):
            bounded = functools.partial(self.planner.plan_graph, new_lowerings=lowerings, hints=hints)
            try:
                with ti.lazy_codegen():
                    peak = inductor_memory.predict_peak(
                        result.forward, result.backward, num_user_outputs=users, hints=hints, planner=bounded
                    )
            except Exception:  # the check itself says why, if it fails too
                log.debug("recompute_pass: bounding a plan's peak failed:\n%s", traceback.format_exc())
                return saved
            bound = max(bound, peak.peak_bytes)
            if bound > over:
                break
        return bound

    def extract(self, plan: Plan) -> tuple[Partition, SizeHints]:
        """The plan's graphs, extracted once per plan, and the size hints they are planned at."""
        if plan not in self.extracted:
            with ti.lazy_codegen():  # most plans checked are never run
                self.extracted[plan] = extract_plan(self.costed, plan, self.plan_sizes, rebuild=self.inductor)
        return self.extracted[plan]

    def realize(self, plan: Plan) -> tuple[Partition, PeakEstimate]:
        """The plan's graphs and their predicted peak."""
        if plan not in self.realized:
            result, hints = self.extract(plan)
            with ti.lazy_codegen():
                peak = predict(self.costed, result, hints, inductor=self.inductor, planner=self.planner)
            self.realized[plan] = (result, peak)
        return self.realized[plan]

    def windows(self, plan: Plan) -> OffloadProblem:
        assert self.offload is not None
        nodes = PlanNodes.of(self.costed, plan)
        order = self.schedule.backward_order(set(nodes.saved), set(nodes.recomputed))
        return for_order(self.offload, self.costed, order)

    def optimum(self, caps: Callable[[], Sequence[int]], deadline: float) -> list[Plan]:
        """Small graphs: the exact MILP over the walk's peak (built only when the search asks)."""
        solver = PeakSolver.of(self.costed, self.schedule, time_limit=self.time_limit)
        return [] if solver is None else solver.plans(caps(), deadline)


def realize(
    costed: Costed,
    plan: Plan,
    *,
    inductor: bool = False,
    plan_sizes: dict[str, int] | None = None,
    planner: composed.PieceLowerings | None = None,
) -> tuple[Partition, PeakEstimate]:
    """The graphs a plan runs as, and their predicted peak: from Inductor's memory plan
    when ``inductor`` (the graphs will be compiled by Inductor; composed from the graphs'
    pieces with ``planner``), else from the graphs; at ``plan_sizes`` where given
    (``RecomputeOptions.plan_sizes``)."""
    result, hints = extract_plan(costed, plan, plan_sizes or {}, rebuild=inductor)
    return result, predict(costed, result, hints, inductor=inductor, planner=planner)


def extract_plan(
    costed: Costed, plan: Plan, plan_sizes: dict[str, int], *, rebuild: bool
) -> tuple[Partition, SizeHints]:
    """The graphs a plan runs as, and the size hints they are planned at. ``rebuild``: where
    Inductor compiles the backward and predicts its peak, three rewrites free backward
    memory: cheap recomputed values computed again before each use (``extract.rebuild``),
    recomputed sums stored once (``extract.sums``), scales read only by GEMMs moved onto
    their outputs (``extract.scale``). On the graphs the joint-graph walk scores plans by
    replaying extraction exactly, which they would break."""
    nodes = PlanNodes.of(costed, plan)
    result = extract(costed.joint, list(nodes.saved), set(nodes.recomputed), list(nodes.replayed))
    # Read again: replaying a draw can add a symbol (its state's size) after costing.
    hints = planned_hints(result.forward.graph, plan_sizes)
    if rebuild:
        recomputed = set(result.recomputed)
        rebuilt = rebuild_at_each_use(result.backward, recomputed, hints)
        stored = store_sums(result.backward, recomputed, hints)
        scaled = hoist_scales(result.backward, hints)
        result = dataclasses.replace(result, rebuilt=rebuilt, stored=stored, scaled=scaled)
    if plan.offloaded:
        names = [costed.joint.candidates[i].node.name for i in sorted(plan.offloaded)]
        result = offload_partition(result, names, costed.device, hints)
    return result, hints


def predict(
    costed: Costed,
    result: Partition,
    hints: SizeHints,
    *,
    inductor: bool,
    planner: composed.PieceLowerings | None,
) -> PeakEstimate:
    """The predicted peak of a plan's graphs (``realize``)."""
    args = (result.forward, result.backward)
    users = costed.joint.num_fwd_outputs
    if inductor:
        try:
            lower = inductor_memory.plan_graph if planner is None else planner.plan_graph
            return inductor_memory.predict_peak(*args, num_user_outputs=users, hints=hints, planner=lower)
        except Exception as error:  # a prediction, never worth failing the compile for
            cause = f"{type(error).__name__}: {error}".splitlines()[0][:200]
            _warn_inductor_model_failed(cause)
            log.debug("recompute_pass: Inductor memory plan failed:\n%s", traceback.format_exc())
            peak = liveness.predict_peak(*args, num_user_outputs=users, hints=hints)
            return dataclasses.replace(peak, note=f"Inductor's memory plan failed ({cause})")
    return liveness.predict_peak(*args, num_user_outputs=users, hints=hints)


@functools.cache
def _warn_inductor_model_failed(cause: str) -> None:
    """Once per cause: the peak then comes from the graphs, which mispredict Inductor's."""
    log.warning(
        "recompute_pass: predicting the peak from the graphs; Inductor's memory plan failed: %s", cause
    )
