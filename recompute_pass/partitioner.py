"""The AOTAutograd partitioner: joint graph -> costs -> solver -> extraction -> report.

The pipeline (``partition``) and its plug-in for Inductor and AOTAutograd
(``RecomputePartitioner``, which falls back to PyTorch's partitioner on an error). A
plan's graphs and predicted peak, and the scoring of plans by the peak search, are
``realization``'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import logging
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import fx

from cost_model import unmodelled_workspace
from recompute_pass import torch_internals as ti
from recompute_pass.extract.extraction import Partition
from recompute_pass.graph.costing import Costed, build_problem, measure, resolve_device
from recompute_pass.graph.joint_graph import RegionBudgetError, analyze, prepare
from recompute_pass.graph.plan_sizes import planned_hints
from recompute_pass.memory import composed
from recompute_pass.memory.audit import CompileAudit
from recompute_pass.memory.liveness import PeakEstimate
from recompute_pass.options import RecomputeOptions
from recompute_pass.plan_sync import (
    PlanSyncError,
    agree,
    agree_to_fail,
    graph_digest,
    partition_digest,
    rank_and_world,
)
from recompute_pass.realization import JointScorer, realize
from recompute_pass.report import store as report_store
from recompute_pass.report.build import build_report
from recompute_pass.report.publishing import publish
from recompute_pass.report.record import PartitionReport
from recompute_pass.search.decide import Decision, decide
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


@dataclass(frozen=True)
class Priced:
    """A joint graph costed: what each plan of it is chosen from, and how its peaks are
    predicted. ``options``: the caller's, or a region budget's where the graph has one."""

    costed: Costed
    options: RecomputeOptions
    sizes: dict[str, int]  # ``plan_sizes``
    inductor: bool  # peaks from Inductor's memory plan
    planner: composed.PieceLowerings | None  # a deep graph's peaks, composed from its blocks

    def scorer(self, realized: dict[Plan, tuple[Partition, PeakEstimate]]) -> JointScorer:
        return JointScorer.of(
            self.costed,
            self.options,
            inductor=self.inductor,
            plan_sizes=self.sizes,
            realized=realized,
            planner=self.planner,
        )


def price(
    module: fx.GraphModule,
    *,
    num_fwd_outputs: int,
    static_lifetime_input_indices: Sequence[int],
    options: RecomputeOptions,
    compiler: str | None = None,
) -> Priced:
    """Stages 1 and 2: the joint graph read and costed (``module`` is prepared in place)."""
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
    # A deep graph's peaks through Inductor: composed from its distinct blocks' lowerings.
    planner = composed.for_graph(joint.module) if inductor and options.budgets_peak else None
    return Priced(costed, options, sizes, inductor, planner)


@dataclass(frozen=True)
class FixedPlan:
    """A plan chosen elsewhere (for the whole step, ``recompute_pass.step``): the items it
    saves and recomputes, by their index in the problem of the joint graph whose digest is
    ``graph`` (``joint_digest``: a graph equal in structure, another block's, takes it by
    position), with the budget it was chosen for (the step's peak budget and range)."""

    graph: str
    saved: tuple[int, ...]
    recomputed: tuple[int, ...]
    budget_bytes: int
    min_bytes: int | None
    max_bytes: int | None
    note: str

    def digest(self) -> str:
        return hashlib.sha256(repr((self.graph, self.saved, self.recomputed)).encode()).hexdigest()[:16]


def joint_digest(costed: Costed) -> str:
    """The structure of a priced joint graph (``plan_sync.graph_digest``)."""
    return graph_digest(costed.joint.module.graph).hex()


def partition(
    module: fx.GraphModule,
    *,
    num_fwd_outputs: int,
    static_lifetime_input_indices: Sequence[int],
    options: RecomputeOptions,
    compiler: str | None = None,
    plan: FixedPlan | None = None,
    chosen: Callable[[Costed, Plan], None] | None = None,
) -> tuple[fx.GraphModule, fx.GraphModule, PartitionReport]:
    """``compiler="inductor"`` when Inductor will compile the result (it changes what a
    saved parameter costs); ``None`` when the graphs run as they are. ``plan``: partition
    under that plan instead of choosing one (a plan it names that this graph lacks is an
    error). ``chosen``: told the plan used (the step's planner keeps it)."""
    priced = price(
        module,
        num_fwd_outputs=num_fwd_outputs,
        static_lifetime_input_indices=static_lifetime_input_indices,
        options=options,
        compiler=compiler,
    )
    costed, options, sizes, inductor, planner = (
        priced.costed,
        priced.options,
        priced.sizes,
        priced.inductor,
        priced.planner,
    )
    realized: dict[Plan, tuple[Partition, PeakEstimate]] = {}
    scorer = None
    if options.budgets_peak and plan is None:  # only a peak budget scores many plans
        scorer = priced.scorer(realized)
    decision = (
        fixed_decision(costed, plan, options) if plan is not None else decide(costed.problem, options, scorer)
    )
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
    if chosen is not None:
        chosen(costed, decision.plan)
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


def indexed_plan(costed: Costed, graph: str, saved: Sequence[int], recomputed: Sequence[int]) -> Plan:
    """The plan that saves and recomputes these items of a joint graph of digest ``graph``,
    on this one, checked like a solver's plan (a ``ValueError`` where it does not fit)."""
    if joint_digest(costed) != graph:
        raise ValueError("the plan was made for a joint graph of another structure")
    plan = Plan(frozenset(saved), frozenset(recomputed))
    violations = plan.violations(costed.problem)
    if violations:
        raise ValueError(f"the plan is invalid on this graph: {violations[:5]}")
    return plan


def fixed_decision(costed: Costed, plan: FixedPlan, options: RecomputeOptions) -> Decision:
    """``plan`` on this graph, as a decision the report can tell."""
    return Decision(
        plan=indexed_plan(costed, plan.graph, plan.saved, plan.recomputed),
        solver="step",
        optimal=False,
        notes=(plan.note,),
        budget_ratio=None if options.peak_memory_bytes is not None else options.memory_budget,
        budget_bytes=plan.budget_bytes,
        min_bytes=plan.min_bytes,
        max_bytes=plan.max_bytes if plan.max_bytes is not None else plan.budget_bytes,
        solve_seconds=0.0,
        frontier=(),
        budget_kind="peak",
    )


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


class RecomputePartitioner(ti.CustomPartitionerFn):
    """Plugs into Inductor as ``custom_partitioner_fn``, or into ``aot_autograd`` as ``partition_fn``."""

    plan: FixedPlan | None = None  # chosen for the step (``recompute_pass.step``), or chosen here
    chosen: Callable[[Costed, Plan], None] | None = None  # told the plan each partition uses

    def __init__(self, options: RecomputeOptions, *, plan: FixedPlan | None = None) -> None:
        self.options = options
        self.plan = plan
        report_store.watch()  # a warm cache's hits republish the reports stored on their miss

    def uuid(self) -> str:
        # Enters Inductor's FX-graph and AOTAutograd cache keys: a warm cache must never
        # return a plan made for other options or other code.
        plan = "" if self.plan is None else f"-step-{self.plan.digest()}"
        return f"recompute_pass-{code_hash()}-{self.options.cache_key()}{plan}"

    def __reduce__(self) -> tuple[type[str], tuple[str]]:
        """Inductor pickles its config, this among it, into its cache keys: what identifies
        the partitioner is its uuid (a step's graph and planner behind it do not pickle)."""
        return (str, (self.uuid(),))

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
                plan=self.plan,
                chosen=self.chosen,
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
