"""Capture the joint forward+backward graphs AOTAutograd hands to a partitioner, as the
library's ``CapturedStep``, and partition or analyse copies of them as the tests need."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from unittest import mock

import torch
from torch import fx

from benchmarks.harness.models import model_cases
from recompute_pass import realization
from recompute_pass import torch_internals as ti
from recompute_pass.capture import CapturedStep
from recompute_pass.graph.joint_graph import JointGraph, analyze, prepare
from recompute_pass.options import RecomputeOptions
from recompute_pass.partitioner import partition
from recompute_pass.report import PartitionReport

REFERENCE_BATCH = 4


def partitioned(
    captured: CapturedStep, **options: object
) -> tuple[fx.GraphModule, fx.GraphModule, PartitionReport]:
    """A fresh copy partitioned as Inductor's partitioner call would (no compile)."""
    return partition(
        captured.copy(),
        num_fwd_outputs=captured.num_fwd_outputs,
        static_lifetime_input_indices=list(captured.static_lifetime_input_indices),
        options=RecomputeOptions(fallback=False, **options),
        compiler="inductor",
    )


def partitioned_without(captured: CapturedStep, rewrite: str, **options: object) -> PartitionReport:
    """The report of ``partitioned`` with one of the backward rewrites ``realization.
    extract_plan`` applies (``rebuild_at_each_use``, ``store_sums``, ``hoist_scales``)
    made a no-op: the peak the rewrite is measured against."""
    with mock.patch.object(realization, rewrite, lambda *args: ()):
        return partitioned(captured, **options)[2]


def analyzed(captured: CapturedStep) -> JointGraph:
    """A fresh copy, prepared and analysed as the partitioner's first stage does."""
    module = captured.copy()
    prepare(module)
    return analyze(
        module,
        num_fwd_outputs=captured.num_fwd_outputs,
        static_lifetime_input_indices=captured.static_lifetime_input_indices,
    )


def capture_joints(
    model: torch.nn.Module, inputs: Sequence[torch.Tensor], *, dynamic: bool = False
) -> list[CapturedStep]:
    """The joint graphs (one per compiled region) of ``model(*inputs).backward()``.

    Copies taken before partitioning, carrying ``meta["val"]`` fake tensors (with SymInt
    sizes when ``dynamic``) and taking their inputs flat (primals, then tangents); the step
    itself runs with PyTorch's partitioner.
    """
    captured: list[CapturedStep] = []

    def capture(gm: fx.GraphModule, joint_inputs: Sequence[object], **kwargs: object):
        # Through AOTAutograd alone: compiler None (``partitioned`` partitions as Inductor would).
        joint = CapturedStep(
            gm, int(kwargs["num_fwd_outputs"]), tuple(kwargs.get("static_lifetime_input_indices") or ()), None
        )
        captured.append(dataclasses.replace(joint, module=joint.copy()))
        return ti.min_cut_rematerialization_partition(gm, joint_inputs, compiler="inductor", **kwargs)

    torch.compiler.reset()
    compiled = torch.compile(model, backend=ti.eager_aot_backend(capture), dynamic=dynamic)
    compiled(*inputs).backward()
    return captured


def reference_joints(name: str, *, dynamic: bool = False) -> tuple[CapturedStep, ...]:
    """The joints of ``benchmarks.harness.models.model_cases()[name]`` at ``REFERENCE_BATCH``.

    Captured once per session and shared by the test files: read them, and partition a
    ``copy()``, never the captured module itself.
    """
    return _reference_joints(name, bool(dynamic))


@functools.cache
def _reference_joints(name: str, dynamic: bool) -> tuple[CapturedStep, ...]:
    case = model_cases()[name]
    torch.manual_seed(0)
    model = case.build()
    torch.manual_seed(1)
    return tuple(capture_joints(model, case.inputs(REFERENCE_BATCH), dynamic=dynamic))
