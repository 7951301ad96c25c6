"""Stage 2: price every candidate with the cost model and state the optimisation problem.

Objective, in estimated seconds of the training step:
- saving a value costs its backward read (``bytes / bandwidth``); a static-lifetime input
  costs nothing;
- recomputing costs the op's roofline time; a pointwise op or view is fused into the
  backward kernel that consumes it, so it costs only its arithmetic, plus one write of its
  output when a backward consumer cannot fuse it (a matmul reads it from memory);
- a backward-only value costs its compute on either side; saving it moves that compute to
  the forward and adds the read.

``device="measure"`` (:func:`measure`): each candidate's time is measured
(``cost_model.measure``) and replaces the roofline's estimate of the same quantity: a
kernel's time, or a fused op's arithmetic. Whether pointwise ops fuse is what will run:
under Inductor they do; without codegen every op is its own kernel. The calibrated profile
prices saved-tensor reads and whatever the time limit left untimed.
"""

from __future__ import annotations

import functools
import logging
import operator
from dataclasses import dataclass

import torch
from torch import fx

from cost_model import (
    MATRIX_KINDS,
    DeviceProfile,
    NodeCost,
    OpKind,
    OpTimes,
    SizeHints,
    classify,
    estimate_runtime,
    get_profile,
    is_constructor,
    measure_op_times,
    tensor_bytes,
)
from recompute_pass.graph import blocks
from recompute_pass.graph.joint_graph import JointGraph
from recompute_pass.solver.problem import Item, Problem

log = logging.getLogger(__name__)

FUSIBLE = frozenset({OpKind.VIEW, OpKind.POINTWISE, OpKind.NONE})


def fuses(node: fx.Node) -> bool:
    """Whether Inductor computes ``node`` inside the kernel that reads it, so that running
    it again costs only its arithmetic: pointwise ops and views, and constructors (an index
    expression: rebuilding ``nll_loss``'s one-hot mask from ``iota`` and ``full`` in
    backward costs nothing, where pricing each as a kernel launch made saving the
    logits-sized mask look cheaper)."""
    return classify(node) in FUSIBLE or is_constructor(node)


# Matched against the device name, first wins: "gh200" before "h200", which it contains.
_GPU_PROFILES = ("gh200", "h200", "h100", "a100")
_DEFAULT_GPU_PROFILE = "h100"


@dataclass(frozen=True)
class Costed:
    """The problem plus what the report needs to describe each item.

    Items are the joint graph's candidates, in order, followed by one generator-state item
    per replayable random draw (``rng_states``): recomputing the draw needs its state saved.
    """

    problem: Problem
    joint: JointGraph
    costs: tuple[NodeCost, ...]  # per candidate
    flops: tuple[int, ...]  # per candidate, at the size hints
    hints: SizeHints
    device: DeviceProfile
    rng_states: dict[int, int]  # generator-state item -> the candidate whose draw it replays


def resolve_device(device: str | DeviceProfile, joint: JointGraph) -> DeviceProfile:
    """``"auto"``: the profile of the GPU the graph runs on, or the CPU profile."""
    if device != "auto":
        return get_profile(device)
    for node in joint.module.graph.find_nodes(op="placeholder"):
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and val.device.type == "cuda":
            name = torch.cuda.get_device_name(val.device) if torch.cuda.is_available() else ""
            profile = next((p for p in _GPU_PROFILES if p in name.lower()), None)
            if profile is None:
                profile = _DEFAULT_GPU_PROFILE
                _warn_unknown_gpu(name, profile)
            return get_profile(profile)
    return get_profile("cpu")


@functools.cache
def _warn_unknown_gpu(name: str, profile: str) -> None:
    """Once per GPU name: its costs are another GPU's, which can move every decision."""
    log.warning(
        "recompute_pass: no device profile matches GPU %r; costing it as %s (choose one with the "
        "device option)",
        name or "unknown",
        profile,
    )


@dataclass(frozen=True)
class Measured:
    """``device="measure"``: measured times per node, and whether pointwise ops fuse."""

    times: OpTimes
    fusion: bool  # Inductor fuses pointwise ops into their consumers; without codegen, none fuse


def measure(joint: JointGraph, *, compiler: str | None, cache_dir: str | None, time_limit: float) -> Measured:
    """Time the candidates whose compute can enter the objective: what may be recomputed,
    and backward-only values (their compute is paid on either side)."""
    fusion = compiler == "inductor"
    timed = [
        c
        for c in joint.candidates
        if c.cost.kind not in (OpKind.VIEW, OpKind.NONE) and (c.can_recompute or not c.forward)
    ]
    times = measure_op_times(
        [c.node for c in timed],
        SizeHints.from_graph(joint.module.graph),
        resolve_device("auto", joint),
        fused={c.node for c in timed if fusion and fuses(c.node)},
        cache_dir=cache_dir,
        time_limit=time_limit,
    )
    return Measured(times, fusion)


def build_problem(
    joint: JointGraph, device: DeviceProfile, measured: Measured | None = None, hints: SizeHints | None = None
) -> Costed:
    """``hints``: where the symbols are evaluated; default the traced sizes."""
    hints = hints if hints is not None else SizeHints.from_graph(joint.module.graph)
    index = {c.node: i for i, c in enumerate(joint.candidates)}
    needed = frozenset(index[n] for n in joint.needed)
    bandwidth = device.memory_bandwidth
    items: list[Item] = []
    states: list[Item] = []
    rng_states: dict[int, int] = {}
    costs: list[NodeCost] = []
    flops: list[int] = []
    fusing = functools.cache(fuses)  # a backward op is asked of once per value it reads
    block_of = blocks.block_labels(joint.module.graph)
    for k, candidate in enumerate(joint.candidates):
        node, cost = candidate.node, candidate.cost
        concrete = cost.evaluate(hints)
        costs.append(cost)
        flops.append(concrete.flops)
        size = (
            0
            if candidate.static or not candidate.can_save
            else hints.evaluate(tensor_bytes(node.meta["val"]))
        )
        fused = fusing(node) and (measured is None or measured.fusion)
        compute = measured.times.seconds.get(node) if measured is not None else None
        if compute is None:
            compute = estimate_runtime(cost, device, hints, fused=fused)
        if fused and not all(fusing(user) for user in joint.backward_users.get(node, ())):
            compute += concrete.bytes_out / bandwidth
        save = size / bandwidth + (0.0 if candidate.forward else compute)
        inputs = tuple(index[n] for n in candidate.inputs)
        if candidate.rng_state_bytes is not None and candidate.can_recompute:
            state = len(joint.candidates) + len(states)
            rng_states[state] = k
            states.append(_rng_state_item(node.name, candidate.rng_state_bytes, bandwidth))
            inputs += (state,)
        items.append(
            Item(
                name=node.name,
                size=size,
                save_cost=save,
                recompute_cost=compute,
                inputs=inputs,
                can_save=candidate.can_save,
                can_recompute=candidate.can_recompute,
                is_forward=candidate.forward,
                is_matrix=cost.kind in MATRIX_KINDS,
                selects_output=node.target is operator.getitem,
                fuses=fusing(node),
                block=block_of.get(node, blocks.OUTSIDE),
            )
        )
    problem = Problem((*items, *states), needed)
    return Costed(problem, joint, tuple(costs), tuple(flops), hints, device, rng_states)


def _rng_state_item(name: str, size: int, bandwidth: float) -> Item:
    """The generator state saved before a random draw: the one way to replay it in backward."""
    return Item(
        name=f"{name}.rng_state",
        size=size,
        save_cost=size / bandwidth,
        recompute_cost=0.0,
        inputs=(),
        can_save=True,
        can_recompute=False,
    )
