"""Stage 4: build the forward and backward graphs AOTAutograd expects from a plan.

PyTorch's extraction does the bookkeeping (output order: user outputs, saved tensors,
saved SymInts; backward placeholders: SymInts, saved tensors, tangents). Backward then
contains every forward value it needs that is not saved, i.e. the recomputation; we check
that this is exactly the plan's, so a plan and the graphs that run never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import fx
from torch.utils.checkpoint import CheckpointPolicy

from recompute_pass import torch_internals as ti
from recompute_pass.graph.joint_graph import JointGraph
from recompute_pass.offloading.problem import Transfer


@dataclass(frozen=True)
class Partition:
    forward: fx.GraphModule
    backward: fx.GraphModule
    saved: tuple[str, ...]  # node names, in forward output order (tensors then SymInts)
    recomputed: tuple[str, ...]  # forward node names the backward graph recomputes
    replayed: tuple[str, ...]  # recomputed random draws, replayed from saved generator state
    offloaded: tuple[Transfer, ...] = ()  # saved values held in host memory (``offload_extraction``)
    rebuilt: tuple[str, ...] = ()  # recomputed values computed again before each use (``rebuild``)
    stored: tuple[str, ...] = ()  # recomputed values stored once so their inputs die early (``store``)
    scaled: tuple[str, ...] = ()  # backward scales moved onto the GEMMs reading them (``scale``)


def extract(
    joint: JointGraph, saved: list[fx.Node], recomputed: set[fx.Node], replayed: list[fx.Node]
) -> Partition:
    """``replayed``: the recomputed random draws, each replayed from its saved generator state."""
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
    # Extraction copies every joint node whose inputs backward has; a random one nobody
    # uses survives the default DCE (drawing counts as an effect) and would advance the
    # generator in backward. Drop it: no draw in backward that the plan did not ask for.
    backward.graph.eliminate_dead_code(is_impure_node=_kept_when_unused)
    backward.recompile()

    forward_names = {c.node.name for c in joint.candidates if c.forward}
    replayed_names = {n.name for n in replayed} & _call_names(backward)
    if replayed:  # before reordering, as PyTorch does: the replays are then placed like draws
        forward, backward = _replay_rng(joint, forward, backward, replayed, len(saved_sym))
    _check_no_fresh_draw(joint, backward)
    # Reordering keeps what the gradients need (dropping, e.g., forward asserts copied along).
    backward = ti.reordering_to_mimic_autograd_engine(backward)
    backward = ti.lazy_graph_module(backward, backward.graph)  # raise_getitems recompiles

    actual = (_call_names(backward) & forward_names) | replayed_names
    expected = {n.name for n in recomputed if n.name in forward_names}
    if actual != expected:
        raise RuntimeError(
            "extracted backward disagrees with the plan: recomputes "
            f"{sorted(actual - expected)[:5]} unplanned, misses {sorted(expected - actual)[:5]}"
        )
    forward = ti.raise_getitems(forward)
    backward = ti.raise_getitems(backward)
    forward = ti.thread_graphsafe_rng_from_hops(forward, is_backward=False)
    backward = ti.thread_graphsafe_rng_from_hops(backward, is_backward=True)
    return Partition(
        forward=forward,
        backward=backward,
        saved=tuple(n.name for n in (*saved_tensors, *saved_sym)),
        recomputed=tuple(n.name for n in joint.module.graph.nodes if n.name in actual),
        replayed=tuple(n.name for n in replayed),
    )


def _call_names(graph: fx.GraphModule) -> set[str]:
    return {n.name for n in graph.graph.nodes if n.op == "call_function"}


# Profiler spans are effects, but copying a forward span into backward is meaningless;
# dropped together (exit first, then its enter), they stay balanced. PyTorch skips them too.
_PROFILER_SPANS = frozenset(
    {
        torch.ops.profiler._record_function_enter.default,
        torch.ops.profiler._record_function_enter_new.default,
        torch.ops.profiler._record_function_exit.default,
        torch.ops.profiler._record_function_exit._RecordFunction,
    }
)


def _kept_when_unused(node: fx.Node) -> bool:
    """Backward DCE: what must run even when nothing reads it (not a draw, not a span)."""
    return node.is_impure(impure_random=False) and node.target not in _PROFILER_SPANS


def _replay_rng(
    joint: JointGraph,
    forward: fx.GraphModule,
    backward: fx.GraphModule,
    replayed: list[fx.Node],
    num_saved_sym: int,
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """Forward draws through ``run_and_save_rng_state`` and outputs the state; backward
    redraws through ``run_with_rng_state`` from it: the same values, bit for bit.

    PyTorch's pass does this for draws tagged for recomputation; we tag exactly the planned
    ones (and only those: a region's draw the plan saves keeps its tag but is not in backward).
    """
    tags = {node: node.meta.get("recompute") for node in replayed}
    for node in replayed:
        node.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
    try:
        return ti.functionalize_rng_ops(joint.module, forward, backward, num_saved_sym)
    finally:  # the joint graph stays as it was: another plan may be realized from it
        for node, tag in tags.items():
            if tag is None:
                node.meta.pop("recompute", None)
            else:
                node.meta["recompute"] = tag


def _check_no_fresh_draw(joint: JointGraph, backward: fx.GraphModule) -> None:
    """A forward draw repeated in backward without its state would draw a different mask."""
    forward_draws = {c.node.name for c in joint.candidates if c.forward and c.cost.is_random}
    fresh = [n.name for n in backward.graph.nodes if n.op == "call_function" and n.name in forward_draws]
    if fresh:
        raise RuntimeError(f"backward would redraw forward random values without their state: {fresh[:5]}")
