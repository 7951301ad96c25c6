"""Stage 4: build the forward and backward graphs AOTAutograd expects from a plan.

PyTorch's extraction does the bookkeeping (output order: user outputs, saved tensors,
saved SymInts; backward placeholders: SymInts, saved tensors, tangents). Backward then
contains every forward value it needs that is not saved, i.e. the recomputation; we check
that this is exactly the plan's, so a plan and the graphs that run never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import fx

from recompute_pass import torch_internals as ti
from recompute_pass.joint_graph import JointGraph


@dataclass(frozen=True)
class Partition:
    forward: fx.GraphModule
    backward: fx.GraphModule
    saved: tuple[str, ...]  # node names, in forward output order (tensors then SymInts)
    recomputed: tuple[str, ...]  # forward node names the backward graph recomputes


def extract(joint: JointGraph, saved: list[fx.Node], recomputed: set[fx.Node]) -> Partition:
    saved_sym = [n for n in saved if ti.is_sym_node(n)]
    saved_tensors = [n for n in saved if not ti.is_sym_node(n)]
    # PyTorch's extraction mutates both lists (drops unused, adds SymInt bindings).
    forward, backward = ti.extract_fwd_bwd_modules(
        joint.module,
        saved_tensors,
        saved_sym_nodes=saved_sym,
        num_fwd_outputs=joint.num_fwd_outputs,
        static_lifetime_input_nodes=joint.node_info.static_lifetime_input_nodes,
    )
    backward = ti.reordering_to_mimic_autograd_engine(backward)
    forward = ti.raise_getitems(forward)
    backward = ti.raise_getitems(backward)
    forward = ti.thread_graphsafe_rng_from_hops(forward, is_backward=False)
    backward = ti.thread_graphsafe_rng_from_hops(backward, is_backward=True)

    forward_names = {c.node.name for c in joint.candidates if c.forward}
    in_backward = {n.name for n in backward.graph.nodes if n.op == "call_function"}
    actual = in_backward & forward_names
    expected = {n.name for n in recomputed if n.name in forward_names}
    if actual != expected:
        raise RuntimeError(
            "extracted backward disagrees with the plan: recomputes "
            f"{sorted(actual - expected)[:5]} unplanned, misses {sorted(expected - actual)[:5]}"
        )
    return Partition(
        forward=forward,
        backward=backward,
        saved=tuple(n.name for n in (*saved_tensors, *saved_sym)),
        recomputed=tuple(n.name for n in joint.module.graph.nodes if n.name in actual),
    )
