"""A partition's report, built from its costed graph, decision, graphs and predicted peak."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import fx

from recompute_pass import torch_internals as ti
from recompute_pass.extract.extraction import Partition
from recompute_pass.graph.costing import Costed
from recompute_pass.memory.liveness import PeakEstimate
from recompute_pass.report.naming import canonical_names, describe_shape, op_name
from recompute_pass.report.record import (
    Gradients,
    OffloadedValue,
    PartitionReport,
    RecomputedValue,
    SavedValue,
)
from recompute_pass.search.decide import Decision


def _unreplayable_draws(costed: Costed, names: dict[fx.Node, str]) -> tuple[str, ...]:
    """Random draws backward cannot replay, so they are never recomputed: say which."""
    draws = [names[c.node] for c in costed.joint.candidates if c.cost.is_random and not c.can_recompute]
    return (f"random, not replayable, never recomputed: {', '.join(draws)}",) if draws else ()


def _rebuilt(partition: Partition, names: dict[str, str]) -> tuple[str, ...]:
    """Recomputed values backward computes again before each use, so none is held between uses."""
    if not partition.rebuilt:
        return ()
    return (f"rebuilt before each use in backward: {', '.join(names.get(n, n) for n in partition.rebuilt)}",)


def _stored(partition: Partition, names: dict[str, str]) -> tuple[str, ...]:
    """Recomputed values backward stores once, so that the products they sum die there."""
    if not partition.stored:
        return ()
    return (f"stored once in backward, inputs freed: {', '.join(names.get(n, n) for n in partition.stored)}",)


def _scaled(partition: Partition) -> tuple[str, ...]:
    """Backward scales applied to GEMM outputs, so that the unscaled gradient alone is stored."""
    if not partition.scaled:
        return ()
    count = len(partition.scaled)
    return (f"scales moved onto GEMM outputs in backward, a gradient buffer freed each: {count}",)


def gradients_of(module: fx.GraphModule, num_fwd_outputs: int, static: Iterable[fx.Node]) -> Gradients | None:
    """Count the joint graph's gradients: its outputs after the forward's are one per primal
    input, None where the input needs none (a frozen weight, a buffer, the batch)."""
    primals = [n for n in module.graph.nodes if ti.is_primal(n)]
    (output,) = module.graph.find_nodes(op="output")
    grads = list(output.args[0][num_fwd_outputs:])
    if len(grads) != len(primals):
        return None  # not the layout AOTAutograd documents: say nothing rather than guess
    statics = set(static)
    counts = [0, 0, 0, 0, 0]
    for primal, grad in zip(primals, grads, strict=True):
        val = primal.meta.get("val")
        has = grad is not None
        counts[4] += has
        if primal not in statics or not isinstance(val, torch.Tensor):
            continue
        elements = val.numel()
        if not isinstance(elements, int):
            return None  # a static input of symbolic size: not a parameter
        counts[0] += has
        counts[1] += 1
        counts[2] += elements if has else 0
        counts[3] += elements
    return Gradients(*counts)


def build_report(
    costed: Costed, decision: Decision, partition: Partition, peak: PeakEstimate
) -> PartitionReport:
    joint, problem = costed.joint, costed.problem
    index = {c.node.name: i for i, c in enumerate(joint.candidates)}
    names = canonical_names(joint.module.graph.nodes)
    by_name = {node.name: name for node, name in names.items()}
    nodes = {c.node.name: c.node for c in joint.candidates}

    saved = []
    for name in partition.saved:
        node, item = nodes[name], problem.items[index[name]]
        shape, dtype = describe_shape(node.meta.get("val"))
        saved.append(
            SavedValue(
                names[node], op_name(node), shape, dtype, item.size, joint.candidates[index[name]].static
            )
        )
    for state, k in sorted(costed.rng_states.items()):
        if state in decision.plan.saved:
            size = problem.items[state].size
            node = joint.candidates[k].node
            name = f"{names[node]}/rng_state"
            saved.append(SavedValue(name, "rng_state", f"[{size}]", "uint8", size, False))
    recomputed = []
    for name in partition.recomputed:
        node = nodes[name]
        shape, _ = describe_shape(node.meta.get("val"))
        kind = costed.costs[index[name]].kind
        recomputed.append(RecomputedValue(names[node], op_name(node), kind, shape, costed.flops[index[name]]))
    recomputed_items = [index[name] for name in partition.recomputed]
    offloaded = []
    for transfer in partition.offloaded:
        node = nodes[transfer.name]
        shape, dtype = describe_shape(node.meta.get("val"))
        both = transfer.d2h_seconds + transfer.h2d_seconds
        exposed = min(transfer.exposed_seconds, both)
        offloaded.append(
            OffloadedValue(
                names[node],
                shape,
                dtype,
                transfer.bytes,
                transfer.d2h_seconds,
                transfer.h2d_seconds,
                both - exposed,
                exposed,
            )
        )
    return PartitionReport(
        budget_ratio=decision.budget_ratio,
        budget_bytes=decision.budget_bytes,
        saved_bytes=sum(s.bytes for s in saved),
        min_bytes=decision.min_bytes,
        max_bytes=decision.max_bytes,
        recompute_flops=sum(r.flops for r in recomputed),
        estimated_recompute_time=sum(problem.items[i].recompute_cost for i in recomputed_items),
        estimated_step_overhead=decision.plan.cost(problem),
        solver=decision.solver,
        optimal=decision.optimal,
        solve_seconds=decision.solve_seconds,
        device=costed.device.name,
        saved=tuple(saved),
        recomputed=tuple(recomputed),
        notes=(
            *decision.notes,
            *_unreplayable_draws(costed, names),
            *_rebuilt(partition, by_name),
            *_stored(partition, by_name),
            *_scaled(partition),
            *filter(None, [peak.note]),
            *[f"backward compiled with Inductor's {k}={v!r} (peaks lower)" for k, v in peak.compile_patches],
        ),
        frontier=decision.peak_frontier
        or tuple((plan.size(problem), plan.cost(problem)) for plan in decision.frontier),
        budget_kind=decision.budget_kind,
        predicted_peak_bytes=peak.peak_bytes,
        peak_at=f"{peak.peak_phase}: {by_name.get(peak.peak_node, peak.peak_node)}",
        peak_model=peak.model,
        peak_timeline=tuple((phase, by_name.get(node, node), live) for phase, node, live in peak.timeline),
        offloaded=tuple(offloaded),
        offload_frontier=decision.offload_frontier,
        gradients=gradients_of(
            joint.module,
            joint.num_fwd_outputs,
            joint.node_info.static_lifetime_input_nodes,  # type: ignore[attr-defined]
        ),
    )
