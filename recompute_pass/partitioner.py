"""The AOTAutograd partitioner: joint graph -> costs -> solver -> extraction -> report."""

from __future__ import annotations

import functools
import hashlib
import logging
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import fx

from recompute_pass import torch_internals as ti
from recompute_pass.costing import build_problem, measure, resolve_device
from recompute_pass.extraction import extract
from recompute_pass.joint_graph import RegionBudgetError, analyze, prepare
from recompute_pass.options import RecomputeOptions
from recompute_pass.report import PartitionReport, build_report, publish
from recompute_pass.solve import decide

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
    static = charged_static_inputs(module, static_lifetime_input_indices, compiler)
    joint = analyze(module, num_fwd_outputs=num_fwd_outputs, static_lifetime_input_indices=static)
    if joint.region_budget is not None:  # the user's word for this graph overrides the global one
        options = options.replace(memory_budget=joint.region_budget, memory_budget_bytes=None)
    measured = None
    if options.device == "measure":
        limit, folder = options.profile_time_limit, options.profile_cache_dir
        measured = measure(joint, compiler=compiler, cache_dir=folder, time_limit=limit)
    device = measured.times.profile if measured is not None else resolve_device(options.device, joint)
    costed = build_problem(joint, device, measured)
    decision = decide(costed.problem, options)
    candidates = joint.candidates
    saved = [candidates[i].node for i in sorted(decision.plan.saved) if i < len(candidates)]
    recomputed = {candidates[i].node for i in decision.plan.recomputed}
    states = sorted(decision.plan.saved & costed.rng_states.keys())
    replayed = [candidates[costed.rng_states[i]].node for i in states]
    result = extract(joint, saved, recomputed, replayed)
    report = build_report(costed, decision, result)
    return result.forward, result.backward, report


class RecomputePartitioner(ti.CustomPartitionerFn):
    """Plugs into Inductor as ``custom_partitioner_fn``, or into ``aot_autograd`` as ``partition_fn``."""

    def __init__(self, options: RecomputeOptions) -> None:
        self.options = options

    def uuid(self) -> str:
        # Enters Inductor's FX-graph and AOTAutograd cache keys: a warm cache must never
        # return a plan made for other options or other code.
        return f"recompute_pass-{code_hash()}-{self.options.cache_key()}"

    def __call__(
        self, gm: fx.GraphModule, joint_inputs: Sequence[object], **kwargs: Any
    ) -> tuple[fx.GraphModule, fx.GraphModule]:
        num_fwd_outputs = kwargs["num_fwd_outputs"]
        static = kwargs.get("static_lifetime_input_indices") or []
        try:
            forward, backward, report = partition(
                gm,
                num_fwd_outputs=num_fwd_outputs,
                static_lifetime_input_indices=static,
                options=self.options,
                compiler=kwargs.get("compiler"),
            )
        except RegionBudgetError:
            raise
        except Exception as error:
            if not self.options.fallback:
                raise
            log.debug("recompute_pass failure:\n%s", traceback.format_exc())
            publish(_fallback_report(self.options, f"{type(error).__name__}: {error}"))
            # The caller's own arguments: ``compiler`` is Inductor's alone, absent from AOTAutograd.
            return ti.min_cut_rematerialization_partition(gm, joint_inputs, **kwargs)
        publish(report)
        return forward, backward


def _fallback_report(options: RecomputeOptions, cause: str) -> PartitionReport:
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
    )
