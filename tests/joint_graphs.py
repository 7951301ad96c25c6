"""Capture the joint forward+backward graphs AOTAutograd hands to a partitioner."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import fx

from recompute_pass import torch_internals as ti


@dataclass(frozen=True)
class CapturedJoint:
    module: fx.GraphModule
    num_fwd_outputs: int
    static_lifetime_input_indices: tuple[int, ...]

    def copy(self) -> fx.GraphModule:
        """A fresh copy: partitioners mutate the module they are given."""
        graph = fx.Graph()
        graph.output(graph.graph_copy(self.module.graph, {}))
        return fx.GraphModule(self.module, graph)


def capture_joints(
    model: torch.nn.Module, inputs: Sequence[torch.Tensor], *, dynamic: bool = False
) -> list[CapturedJoint]:
    """The joint graphs (one per compiled region) of ``model(*inputs).backward()``.

    Copies taken before partitioning, carrying ``meta["val"]`` fake tensors (with SymInt
    sizes when ``dynamic``) and taking their inputs flat (primals, then tangents); the step
    itself runs with PyTorch's partitioner.
    """
    captured: list[CapturedJoint] = []

    def capture(gm: fx.GraphModule, joint_inputs: Sequence[object], **kwargs: object):
        joint = CapturedJoint(
            gm, int(kwargs["num_fwd_outputs"]), tuple(kwargs.get("static_lifetime_input_indices") or ())
        )
        captured.append(
            CapturedJoint(joint.copy(), joint.num_fwd_outputs, joint.static_lifetime_input_indices)
        )
        return ti.min_cut_rematerialization_partition(gm, joint_inputs, compiler="inductor", **kwargs)

    torch.compiler.reset()
    compiled = torch.compile(model, backend=ti.eager_aot_backend(capture), dynamic=dynamic)
    compiled(*inputs).backward()
    return captured


def capture_joint_graphs(
    model: torch.nn.Module, inputs: Sequence[torch.Tensor], *, dynamic: bool = False
) -> list[fx.GraphModule]:
    """Just the graph modules of ``capture_joints``."""
    return [c.module for c in capture_joints(model, inputs, dynamic=dynamic)]
