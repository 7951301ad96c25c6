"""Stage 1: what the joint graph allows.

Reads AOTAutograd's joint forward+backward graph and says, per value the backward may
need, whether it may be saved, whether it may be recomputed, and why not. The rules are
about correctness, not cost: a random draw recomputed in backward draws a different mask,
a mutation repeated applies twice, a saved view keeps its base alive anyway.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import fx
from torch.utils.checkpoint import CheckpointPolicy

from cost_model import NodeCost, OpKind, classify, node_cost
from recompute_pass import torch_internals as ti
from recompute_pass.solver.problem import find_rebuildable

_SAVE_POLICIES = (CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_SAVE)
_RECOMPUTE_POLICIES = (CheckpointPolicy.MUST_RECOMPUTE, CheckpointPolicy.PREFER_RECOMPUTE)


@dataclass(frozen=True)
class Candidate:
    """A value that may cross to backward: a forward value, an input, or a backward-only
    value that depends on forward values alone (PyTorch's "unclaimed" nodes)."""

    node: fx.Node
    cost: NodeCost
    inputs: tuple[fx.Node, ...]  # candidate inputs, in argument order
    forward: bool  # the forward computes it anyway
    static: bool  # a static-lifetime input (parameter): alive anyway, costs no budget
    can_save: bool
    can_recompute: bool
    reason: str  # why saving or recomputing is ruled out ("" when both are allowed)
    # A random draw recomputed by replaying the generator state saved before it (``None``
    # when not random): the state's bytes are what recomputing it costs in memory.
    rng_state_bytes: int | None = None


@dataclass(frozen=True)
class JointGraph:
    module: fx.GraphModule
    node_info: object  # torch's NodeInfo, handed back to extraction
    num_fwd_outputs: int
    candidates: tuple[Candidate, ...]  # graph order
    needed: frozenset[fx.Node]  # candidates backward reads
    backward_users: dict[fx.Node, tuple[fx.Node, ...]]  # candidate -> its backward-only users
    # ``torch.autograd.graph.region_activation_memory_budget`` over the whole forward, if set.
    region_budget: float | None = None


class RegionBudgetError(RuntimeError):
    """``region_activation_memory_budget`` used in a way PyTorch rejects: a user error, raised
    even when ``fallback`` is on (PyTorch's partitioner would raise it too)."""


def prepare(module: fx.GraphModule) -> None:
    """The bookkeeping PyTorch's min-cut partitioner does before deciding, in its order."""
    module.graph.eliminate_dead_code()
    module.recompile()
    if ti.functorch_config.cse:
        module.graph = ti.fx_graph_cse(module.graph)
    if any(_policy(n) in _RECOMPUTE_POLICIES for n in module.graph.nodes):
        ti.cleanup_recompute_tags(module, is_default_partition=False)
    if not ti.functorch_config.unsafe_allow_optimization_of_collectives:
        ti.force_save_collectives(module)
    ti.force_save_effectful_ops(module)
    ti.force_save_bw_mutation_src(module)


def analyze(
    module: fx.GraphModule, *, num_fwd_outputs: int, static_lifetime_input_indices: Sequence[int]
) -> JointGraph:
    info = ti.classify_nodes(module, list(static_lifetime_input_indices), num_fwd_outputs)
    _, bwd_outputs, _, _ = ti.extract_fwd_bwd_outputs(module, num_fwd_outputs=num_fwd_outputs)
    backward = {n for n in info.required_bw_nodes if not info.is_required_fw(n)}
    static = set(info.static_lifetime_input_nodes)

    stale = _reads_of_mutated_inputs(module.graph)
    by_node: dict[fx.Node, Candidate] = {}  # graph order
    for node in module.graph.nodes:
        is_input = ti.is_primal(node) or ti.is_fwd_seed_offset(node)
        if (
            node in backward
            or node.op not in ("placeholder", "call_function")
            or not (is_input or node.op == "call_function")
        ):
            continue
        inputs = tuple(dict.fromkeys(n for n in node.all_input_nodes if n in by_node))
        by_node[node] = _candidate(
            node, inputs, forward=info.is_required_fw(node), static=node in static, stale=node in stale
        )
    # Forbidding saving a rebuildable value leaves what backward can have unchanged, so the
    # region's tags may be applied after the walk.
    rebuildable = find_rebuildable(by_node)
    checkpointed = _checkpointed(by_node)
    candidates = tuple(
        _forbid_saving(c, c.node in rebuildable) if c.node in checkpointed else c for c in by_node.values()
    )

    backward_users: dict[fx.Node, list[fx.Node]] = {}
    for node in module.graph.nodes:
        if node in backward and node.op != "output":  # forward outputs are not backward reads
            for arg in node.all_input_nodes:
                if arg in by_node:
                    backward_users.setdefault(arg, []).append(node)
    needed = set(backward_users)
    needed.update(n for n in bwd_outputs if isinstance(n, fx.Node) and n in by_node)
    return JointGraph(
        module=module,
        node_info=info,
        num_fwd_outputs=num_fwd_outputs,
        candidates=candidates,
        needed=frozenset(needed),
        backward_users={k: tuple(v) for k, v in backward_users.items()},
        region_budget=_region_budget(module, info),
    )


def _region_budget(module: fx.GraphModule, info: object) -> float | None:
    """The graph's region budget, validated as PyTorch's partitioner validates it.

    Torch 2.13 applies one budget per joint graph: every annotated node must agree, and the
    annotation must cover every forward op, higher-order op bodies included (separate
    budgets take a graph break). We raise the same errors rather than guess a meaning.
    """
    budgets: set[float] = set()
    unannotated: list[str] = []
    for graph_module in module.modules():
        if not isinstance(graph_module, fx.GraphModule):
            continue
        top = graph_module is module
        for node in graph_module.graph.nodes:
            budget = ti.region_memory_budget(node)
            if budget is not None:
                budgets.add(budget)
            elif node.op == "call_function" and (not top or info.is_required_fw(node)):
                unannotated.append(node.name)
    if not budgets:
        return None
    prefix = "torch.autograd.graph.region_activation_memory_budget"
    if len(budgets) > 1:
        raise RegionBudgetError(
            f"{prefix}: conflicting budgets within a single joint graph (including nested subgraphs): "
            f"{sorted(budgets)}. Use a graph break to separate regions that need different budgets."
        )
    if unannotated:
        raise RegionBudgetError(
            f"{prefix}: must cover the entire forward of a graph (including HOP bodies), but "
            f"{len(unannotated)} forward op(s) are unannotated: {unannotated[:10]}. Wrap the whole "
            "forward in one region; use a graph break to scope different budgets to different graphs."
        )
    return budgets.pop()


def _policy(node: fx.Node) -> object:
    return node.meta.get("recompute")


def _owns_storage(node: fx.Node, kind: OpKind) -> bool:
    """Saving a view keeps its base alive: only values that own their storage are saved.

    A getitem of a multi-output op (var_mean, native_dropout, attention) *is* that op's
    result; a getitem of a view op (split, unbind) is a view.
    """
    if node.target is operator.getitem:
        parent = node.args[0]
        return isinstance(parent, fx.Node) and classify(parent) != OpKind.VIEW
    return kind != OpKind.VIEW


def _reads_of_mutated_inputs(graph: fx.Graph) -> set[fx.Node]:
    """The ops that read an input the step writes in place (a buffer the forward updates:
    kept in the graph as ``copy_(buffer, new)``, or written back by the runtime after the
    forward), through views, but not the writes.

    Recomputed in backward, such a read sees the input after the write (a step counter read
    once more: wrong gradients, silently; PyTorch's partitioners too in torch 2.13, see
    pytorch/pytorch#197039). So these are saved, never recomputed; what is computed from
    them may still be."""
    writes = {n: ti.written_arguments(n) for n in graph.nodes if n.op == "call_function"}
    pending = [v for written in writes.values() for v in written if v.op == "placeholder"]
    pending += ti.inputs_written_back(graph)
    reads: set[fx.Node] = set()
    seen: set[fx.Node] = set()
    while pending:
        value = pending.pop()
        if value in seen:
            continue
        seen.add(value)
        for user in value.users:
            if value in writes.get(user, ()):
                continue  # the write itself
            if user.target is not operator.getitem and classify(user) == OpKind.VIEW:
                pending.append(user)  # an alias: its readers read the input
            else:
                reads.add(user)
    return reads


def _candidate(
    node: fx.Node, inputs: tuple[fx.Node, ...], *, forward: bool, static: bool, stale: bool = False
) -> Candidate:
    """``stale``: the node reads an input the graph writes later (``_reads_of_mutated_inputs``)."""
    val = node.meta.get("val")
    cost = node_cost(node)
    if node.op == "placeholder":
        return Candidate(node, cost, (), True, static, True, False, "input")
    if ti.is_sym_node(node):
        # Shape arithmetic: saved as a SymInt (free), never worth recomputing.
        return Candidate(node, cost, inputs, forward, False, True, False, "symint")

    kind = cost.kind
    reasons: list[str] = []
    can_save = True
    if val is None:
        can_save = False
        reasons.append("no metadata")
    elif not isinstance(val, torch.Tensor):
        can_save = False
        reasons.append("not a tensor")
    elif not _owns_storage(node, kind):
        can_save = False
        reasons.append("view")
    if ti.must_be_in_backward(node):
        can_save = False
        reasons.append("must run in backward")

    can_recompute = True
    rng_state_bytes = None
    # Randomness is the cost model's call: it knows attention draws only with dropout.
    if cost.is_random:
        # A second draw differs (wrong gradients) unless it replays the saved generator state.
        rng_state_bytes = ti.replayable_rng_state_bytes(node)
        if rng_state_bytes is None:
            can_recompute = False
            reasons.append("random, not replayable")
    elif kind == OpKind.COLLECTIVE and not ti.functorch_config.unsafe_allow_optimization_of_collectives:
        # Recomputing one doubles its communication, even where a checkpoint region asks for
        # it (PyTorch honours that tag; we save the result instead).
        can_recompute = False
        reasons.append("collective")
    elif isinstance(node.target, ti.HigherOrderOperator):
        can_recompute = False
        reasons.append("higher-order op")
    elif kind == OpKind.UNKNOWN and not ti.is_functional_op(node.target):
        can_recompute = False  # not proven pure: the op may have effects its schema hides
        reasons.append("unknown op")
    elif node.is_impure(impure_random=False) or ti.must_be_in_forward(node):
        can_recompute = False
        reasons.append("side effect")
    elif stale:
        can_recompute = False
        reasons.append("reads an input the forward writes")

    policy = _policy(node)
    if policy in _SAVE_POLICIES and can_save and can_recompute:
        can_recompute = False
        reasons.append(f"{policy.name}")
    return Candidate(
        node, cost, inputs, forward, False, can_save, can_recompute, ", ".join(reasons), rng_state_bytes
    )


def _checkpointed(by_node: dict[fx.Node, Candidate]) -> set[fx.Node]:
    """A checkpointed region's values (tagged MUST/PREFER_RECOMPUTE by ``torch.utils.checkpoint``)
    and the backward-only values computed from them (graph order: inputs come first)."""
    region: set[fx.Node] = set()
    for node, candidate in by_node.items():
        if _policy(node) in _RECOMPUTE_POLICIES or (
            not candidate.forward and any(n in region for n in candidate.inputs)
        ):
            region.add(node)
    return region


def _forbid_saving(candidate: Candidate, rebuildable: bool) -> Candidate:
    """A checkpointed region's value may not be saved: the user asked for the region's memory
    back. Unless backward could not rebuild it then: a value downstream of a random draw
    that cannot be replayed must stay savable."""
    if not candidate.can_save or not rebuildable:
        return candidate
    policy = _policy(candidate.node)
    tag = policy.name if policy in _RECOMPUTE_POLICIES else "derived from a checkpointed region"
    reason = ", ".join(r for r in (candidate.reason, tag) if r)
    return dataclasses.replace(candidate, can_save=False, reason=reason)
