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


@dataclass(frozen=True)
class JointGraph:
    module: fx.GraphModule
    node_info: object  # torch's NodeInfo, handed back to extraction
    num_fwd_outputs: int
    candidates: tuple[Candidate, ...]  # graph order
    needed: frozenset[fx.Node]  # candidates backward reads
    backward_users: dict[fx.Node, tuple[fx.Node, ...]]  # candidate -> its backward-only users


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

    candidates: list[Candidate] = []
    by_node: dict[fx.Node, Candidate] = {}
    obtainable: dict[fx.Node, bool] = {}  # saved or rebuilt: backward can have it
    for node in module.graph.nodes:
        is_input = ti.is_primal(node) or ti.is_fwd_seed_offset(node)
        if (
            node in backward
            or node.op not in ("placeholder", "call_function")
            or not (is_input or node.op == "call_function")
        ):
            continue
        inputs = tuple(dict.fromkeys(n for n in node.all_input_nodes if n in by_node))
        candidate = _candidate(node, inputs, forward=info.is_required_fw(node), static=node in static)
        candidate = _apply_recompute_policy(candidate, obtainable)
        candidates.append(candidate)
        by_node[node] = candidate
        obtainable[node] = candidate.can_save or _rebuildable(candidate, obtainable)

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
        candidates=tuple(candidates),
        needed=frozenset(needed),
        backward_users={k: tuple(v) for k, v in backward_users.items()},
    )


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


def _candidate(node: fx.Node, inputs: tuple[fx.Node, ...], *, forward: bool, static: bool) -> Candidate:
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
    # Randomness is the cost model's call: it knows attention draws only with dropout.
    if cost.is_random:  # a second draw would differ: wrong gradients
        can_recompute = False
        reasons.append("random")
    elif isinstance(node.target, ti.HigherOrderOperator):
        can_recompute = False
        reasons.append("higher-order op")
    elif kind == OpKind.UNKNOWN:  # a custom op may have effects the schema does not show
        can_recompute = False
        reasons.append("unknown op")
    elif node.is_impure(impure_random=False) or ti.must_be_in_forward(node):
        can_recompute = False
        reasons.append("side effect")

    policy = _policy(node)
    if policy in _SAVE_POLICIES and can_save and can_recompute:
        can_recompute = False
        reasons.append(f"{policy.name}")
    return Candidate(node, cost, inputs, forward, False, can_save, can_recompute, ", ".join(reasons))


def _rebuildable(candidate: Candidate, obtainable: dict[fx.Node, bool]) -> bool:
    """Whether backward can recompute the value from values it can have (graph order:
    every input was decided before its users)."""
    return candidate.can_recompute and all(obtainable[n] for n in candidate.inputs)


def _apply_recompute_policy(candidate: Candidate, obtainable: dict[fx.Node, bool]) -> Candidate:
    """A MUST/PREFER_RECOMPUTE tag (``torch.utils.checkpoint``) forbids saving the value,
    unless backward could not rebuild it then: a value downstream of a random draw (dropout
    in a checkpointed region) is never recomputed here, so it must stay savable."""
    policy = _policy(candidate.node)
    if policy not in _RECOMPUTE_POLICIES or not candidate.can_save or not _rebuildable(candidate, obtainable):
        return candidate
    reason = ", ".join(r for r in (candidate.reason, policy.name) if r)
    return dataclasses.replace(candidate, can_save=False, reason=reason)
