"""The AOTAutograd partitioner: joint graph -> costs -> solver -> extraction -> report."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import logging
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import fx

from cost_model import SizeHints, unmodelled_workspace
from recompute_pass import report_store
from recompute_pass import torch_internals as ti
from recompute_pass.extract.extraction import Partition, extract
from recompute_pass.extract.offload import offload_partition
from recompute_pass.extract.rebuild import rebuild_at_each_use
from recompute_pass.extract.scale import hoist_scales
from recompute_pass.extract.store import store_sums
from recompute_pass.graph.costing import Costed, build_problem, measure, resolve_device
from recompute_pass.graph.joint_graph import RegionBudgetError, analyze, prepare
from recompute_pass.graph.plan_sizes import planned_hints
from recompute_pass.memory import composed, inductor_memory, liveness
from recompute_pass.memory.audit import CompileAudit
from recompute_pass.memory.liveness import PeakEstimate
from recompute_pass.memory.plan_peak import JointSchedule
from recompute_pass.offloading.peak import with_offload
from recompute_pass.offloading.problem import OffloadProblem
from recompute_pass.offloading.schedule import for_order, windows
from recompute_pass.options import RecomputeOptions
from recompute_pass.plan_sync import PlanSyncError, agree, agree_to_fail, partition_digest, rank_and_world
from recompute_pass.report import PartitionReport, build_report, publish
from recompute_pass.search.decide import decide
from recompute_pass.search.peak_budget import COMPOSED_CHECKS, checks_within
from recompute_pass.search.peak_milp import PeakSolver
from recompute_pass.solver.problem import Plan

log = logging.getLogger(__name__)


@functools.cache
def code_hash() -> str:
    """Digest of this package's and the cost model's source: a code change is a new plan."""
    digest = hashlib.sha256()
    for package in ("recompute_pass", "cost_model"):
        root = Path(__file__).resolve().parent.parent / package
        for path in sorted(root.rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def charged_static_inputs(module: fx.GraphModule, static: Sequence[int], compiler: str | None) -> list[int]:
    """Static-lifetime inputs that really cost nothing when saved.

    Inductor's layout optimisation converts convolution weights to channels-last inside
    the compiled forward, and what backward then keeps is that copy, not the parameter.
    """
    if compiler != "inductor" or not ti.decide_layout_opt(module):
        return list(static)
    primals = [n for n in module.graph.nodes if ti.is_primal(n)]
    weights = {n.args[1] for n in module.graph.nodes if n.target is torch.ops.aten.convolution.default}
    return [i for i in static if primals[i] not in weights or not _copied_to_channels_last(primals[i])]


def _copied_to_channels_last(weight: fx.Node) -> bool:
    """Inductor converts 2-D convolution weights (4-D tensors) with ``require_channels_last``,
    which copies only a weight not already channels-last: depthwise ([C, 1, k, k]) and 1x1
    weights are, since strides of size-1 dimensions do not matter."""
    val = weight.meta.get("val")
    return (
        isinstance(val, torch.Tensor)
        and val.dim() == 4
        and not val.is_contiguous(memory_format=torch.channels_last)
    )


def partition(
    module: fx.GraphModule,
    *,
    num_fwd_outputs: int,
    static_lifetime_input_indices: Sequence[int],
    options: RecomputeOptions,
    compiler: str | None = None,
) -> tuple[fx.GraphModule, fx.GraphModule, PartitionReport]:
    """``compiler="inductor"`` when Inductor will compile the result (it changes what a
    saved parameter costs); ``None`` when the graphs run as they are."""
    prepare(module)
    primals = [n for n in module.graph.nodes if ti.is_primal(n)]
    static = ti.flat_static_input_indices(primals, static_lifetime_input_indices)
    static = charged_static_inputs(module, static, compiler)
    joint = analyze(module, num_fwd_outputs=num_fwd_outputs, static_lifetime_input_indices=static)
    if joint.region_budget is not None:
        # The user's word for this graph overrides the global one, in PyTorch's units:
        # a ratio of saved activation bytes.
        options = options.replace(
            memory_budget=joint.region_budget,
            memory_budget_bytes=None,
            peak_memory_bytes=None,
            budget_mode="saved",
            offload=False,  # a saved-bytes budget: offload needs a peak budget
        )
    measured = None
    if options.device == "measure":
        limit, folder = options.profile_time_limit, options.profile_cache_dir
        measured = measure(joint, compiler=compiler, cache_dir=folder, time_limit=limit)
    device = measured.times.profile if measured is not None else resolve_device(options.device, joint)
    sizes = options.plan_size_map()
    hints = planned_hints(joint.module.graph, sizes) if sizes else None
    costed = build_problem(joint, device, measured, hints)
    # Inductor's memory model does not know the offload ops: with offload, every plan's
    # peak comes from the graphs, so that plans with and without offload compare alike.
    inductor = compiler == "inductor" and options.peak_model == "auto" and not options.offload
    realized: dict[Plan, tuple[Partition, PeakEstimate]] = {}
    # A deep graph's peaks through Inductor: composed from its distinct blocks' lowerings.
    planner = composed.for_graph(joint.module) if inductor and options.budgets_peak else None
    scorer = None
    if options.budgets_peak:  # only a peak budget scores many plans
        scorer = JointScorer.of(
            costed, options, inductor=inductor, plan_sizes=sizes, realized=realized, planner=planner
        )
    decision = decide(costed.problem, options, scorer)
    if scorer is not None and scorer.walked:
        walked, extracted = scorer.estimate(decision.plan), scorer.realize(decision.plan)[1].peak_bytes
        if walked != extracted:
            log.warning(
                "recompute_pass: the joint-graph walk predicted %d B, the extracted graphs %d B; "
                "choosing again on extracted graphs",
                walked,
                extracted,
            )
            decision = decide(costed.problem, options, scorer.on_graphs())
    # Under a process group: every rank's plan is rank 0's (or was equal to it already).
    synced = agree(costed, decision, options)
    if planner is not None and synced.decision.plan != decision.plan:
        realized.pop(synced.decision.plan, None)  # a composed peak: lowered whole below
    decision = synced.decision
    composed_peak = planner is not None and decision.plan in realized  # else lowered whole below
    if decision.plan not in realized:
        realized[decision.plan] = realize(costed, decision.plan, inductor=inductor, plan_sizes=sizes)
    result, peak = realized[decision.plan]
    if composed_peak:
        assert planner is not None
        peak = _audited(result, peak, costed, options, planner)
    peak = _with_unmodelled_workspaces(result, peak)
    if peak.compile_patches:  # the config the predicted peak assumes, applied on every route
        result.backward.meta[ti.COMPILE_PATCHES] = dict(peak.compile_patches)
        ti.honour_compile_patches()
    rank, world = rank_and_world()
    report = build_report(costed, decision, result, peak)
    report = dataclasses.replace(report, plan_digest=synced.digest, rank=rank, world_size=world)
    return result.forward, result.backward, report


def _audited(
    result: Partition,
    peak: PeakEstimate,
    costed: Costed,
    options: RecomputeOptions,
    planner: composed.PieceLowerings,
) -> PeakEstimate:
    """A composed peak is checked on the real compile's own lowering (``memory.audit``)."""
    note = f"peaks composed from Inductor's plans of the graph's pieces ({planner.describe()})"
    if options.plan_size_map():  # the compile lowers at the traced sizes, not the planned ones
        return dataclasses.replace(peak, note=_joined(peak.note, note))
    users = costed.joint.num_fwd_outputs
    hints = planned_hints(result.forward.graph, {})
    CompileAudit(result.forward, result.backward, users, hints, peak.peak_bytes).attach()
    note += "; checked against the compiled graphs' own memory plan (logged when Inductor compiles them)"
    return dataclasses.replace(peak, note=_joined(peak.note, note))


def _with_unmodelled_workspaces(result: Partition, peak: PeakEstimate) -> PeakEstimate:
    """A reduced-precision CPU matmul's own workspace is in no prediction
    (``cost_model.unmodelled_workspace``): said in the report, warned of once per kind."""
    graphs = (result.forward.graph, result.backward.graph)
    ops = sorted({str(n.target) for graph in graphs for n in graph.nodes if _packs(n)})
    if not ops:
        return peak
    note = f"the predicted peak leaves out each reduced-precision CPU matmul's workspace ({', '.join(ops)})"
    _warn_once(note)
    return dataclasses.replace(peak, note=_joined(peak.note, note))


def _packs(node: fx.Node) -> bool:
    val = node.meta.get("val")
    if node.op != "call_function" or not isinstance(val, torch.Tensor):
        return False
    return unmodelled_workspace(node.target, val.device.type, val.dtype)


@functools.cache
def _warn_once(note: str) -> None:
    log.warning("recompute_pass: %s: the measured peak may exceed it by up to those workspaces", note)


def _joined(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


# At most this many pieces not lowered before are lowered to bound a plan's peak
# (``JointScorer.floor``); past them the plan is checked whole.
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
    replays exactly (tests/test_liveness.py): the search then extracts no plan and checks
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
        costed = self.costed
        nodes = PlanNodes.of(costed, plan)
        estimate = self.schedule.peak(set(nodes.saved), nodes.recomputed, nodes.state_bytes(costed))
        if plan.offloaded:
            off = {costed.joint.candidates[i].node: costed.problem.items[i].size for i in plan.offloaded}
            estimate = with_offload(estimate, off, self.graph_nodes, costed.device, costed.hints)
        return estimate.peak_bytes

    def exact(self, plan: Plan) -> int:
        return self.estimate(plan) if self.walked else self.realize(plan)[1].peak_bytes

    def floor(self, plan: Plan, over: int | None = None) -> int:
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
    recomputed sums stored once (``extract.store``), scales read only by GEMMs moved onto
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


class RecomputePartitioner(ti.CustomPartitionerFn):
    """Plugs into Inductor as ``custom_partitioner_fn``, or into ``aot_autograd`` as ``partition_fn``."""

    def __init__(self, options: RecomputeOptions) -> None:
        self.options = options
        report_store.watch()  # a warm cache's hits republish the reports stored on their miss

    def uuid(self) -> str:
        # Enters Inductor's FX-graph and AOTAutograd cache keys: a warm cache must never
        # return a plan made for other options or other code.
        return f"recompute_pass-{code_hash()}-{self.options.cache_key()}"

    def __call__(
        self, gm: fx.GraphModule, joint_inputs: Sequence[object], **kwargs: Any
    ) -> tuple[fx.GraphModule, fx.GraphModule]:
        num_fwd_outputs = kwargs["num_fwd_outputs"]
        static = kwargs.get("static_lifetime_input_indices") or []
        fake_mode = report_store.joint_fake_mode(gm)
        if ti.is_subgraph_body_call(joint_inputs):
            # The body's inputs are the enclosing graph's values (weights among them):
            # holding them costs nothing here, as in PyTorch's partitioner.
            static = list(range(sum(ti.is_primal(n) for n in gm.graph.nodes)))
        try:
            forward, backward, report = partition(
                gm,
                num_fwd_outputs=num_fwd_outputs,
                static_lifetime_input_indices=static,
                options=self.options,
                compiler=kwargs.get("compiler"),
            )
        except (RegionBudgetError, PlanSyncError):
            raise
        except Exception as error:
            if not self.options.fallback:
                with contextlib.suppress(PlanSyncError):  # this rank's own error says more
                    agree_to_fail(self.options)
                raise
            log.debug("recompute_pass failure:\n%s", traceback.format_exc())
            agree_to_fail(self.options)
            # The caller's own arguments: ``compiler`` is Inductor's alone, absent from AOTAutograd.
            forward, backward = ti.min_cut_rematerialization_partition(gm, joint_inputs, **kwargs)
            cause = f"{type(error).__name__}: {error}"
            fallback = _fallback_report(self.options, cause, partition_digest(forward, backward))
            publish(fallback)
            report_store.remember(fake_mode, fallback)
            return forward, backward
        publish(report)
        report_store.remember(fake_mode, report)
        return forward, backward


def _fallback_report(options: RecomputeOptions, cause: str, digest: str) -> PartitionReport:
    rank, world = rank_and_world()
    return PartitionReport(
        budget_ratio=None if options.memory_budget_bytes is not None else options.memory_budget,
        budget_bytes=None,
        saved_bytes=None,
        min_bytes=None,
        max_bytes=None,
        recompute_flops=None,
        estimated_recompute_time=None,
        estimated_step_overhead=None,
        solver="pytorch-min-cut",
        optimal=False,
        solve_seconds=0.0,
        device="",
        saved=(),
        recomputed=(),
        fallback=cause,
        plan_digest=digest,
        rank=rank,
        world_size=world,
    )
