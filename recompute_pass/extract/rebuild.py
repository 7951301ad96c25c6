"""Rebuild a cheap recomputed value before each of its uses, instead of keeping one copy.

The joint graph is CSE'd, so a value every block reads, such as the float attention mask
that HF's mask code materialises under ``torch.compile``, is one node. Backward recomputes
it once, before its first use, and holds it until its last: across every block's backward,
on top of each block's own peak. When the value is a pointwise or view chain of saved
inputs that backward holds anyway (index ranges, positions) and is larger than they are,
computing it again before each use costs one fused kernel per use and holds it only there.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

import sympy
from torch import fx

from cost_model import SizeHints, tensor_bytes
from recompute_pass import torch_internals as ti
from recompute_pass.graph.costing import fuses

# Past this many nodes a chain is not "cheap" whatever its ops: copies would bloat the graph.
MAX_CHAIN_NODES = 32
_MODULE_STACKS = ("nn_module_stack", "fwd_nn_module_stack")


def rebuild_at_each_use(
    backward: fx.GraphModule, recomputed: Collection[str], hints: SizeHints
) -> tuple[str, ...]:
    """Copies, in place, each qualifying recomputed value's chain before each of its uses
    after the first; returns the names of the values so rebuilt, in graph order."""
    graph = backward.graph
    rebuilt: list[str] = []
    for node in list(graph.nodes):
        if node.op != "call_function" or node.name not in recomputed or len(node.users) < 2:
            continue
        if all(ti.is_pointwise_use(user) for user in node.users):  # computed inside each reader
            continue
        chain = _cheap_chain(node, recomputed)
        if chain is None or not _larger_than_its_inputs(node, chain, hints):
            continue
        order = {n: i for i, n in enumerate(graph.nodes)}
        for user in sorted(node.users, key=order.__getitem__)[1:]:
            copied: dict[fx.Node, fx.Node] = {}
            with graph.inserting_before(user):
                for original in chain:
                    copied[original] = _copy(graph, original, copied, user)
            user.replace_input_with(node, copied[node])
        rebuilt.append(node.name)
    if rebuilt:
        backward.recompile()
    return tuple(rebuilt)


def _copy(graph: fx.Graph, original: fx.Node, copied: dict[fx.Node, fx.Node], reader: fx.Node) -> fx.Node:
    """A copy under a name no forward node has, so the graphs still say what was recomputed,
    in its reader's module (the block whose backward it belongs to, for ``memory.composed``)."""
    args, kwargs = fx.map_arg((original.args, original.kwargs), lambda n: copied.get(n, n))
    copy = graph.create_node(original.op, original.target, args, kwargs, name=f"{original.name}_rebuilt")
    copy.meta = dict(original.meta)
    for key in _MODULE_STACKS:
        if key in reader.meta:
            copy.meta[key] = reader.meta[key]
        else:
            copy.meta.pop(key, None)
    return copy


def _cheap_chain(value: fx.Node, recomputed: Collection[str]) -> list[fx.Node] | None:
    """``value`` and the recomputed nodes it is computed from, in graph order, if all are
    fusible, deterministic and their other inputs are the backward graph's inputs (live
    anyway); else None."""
    chain: dict[fx.Node, None] = {}
    stack = [value]
    while stack:
        node = stack.pop()
        if node in chain:
            continue
        if node.op == "placeholder":
            continue
        if node.op != "call_function" or not fuses(node) or node.is_impure():
            return None
        if node.name not in recomputed and node.all_input_nodes:  # a constructor need not be a candidate
            return None
        chain[node] = None
        if len(chain) > MAX_CHAIN_NODES:
            return None
        stack.extend(node.all_input_nodes)
    order = {n: i for i, n in enumerate(value.graph.nodes)}
    return sorted(chain, key=order.__getitem__)


def _larger_than_its_inputs(value: fx.Node, chain: list[fx.Node], hints: SizeHints) -> bool:
    """Whether the value holds more bytes than the inputs its copies keep alive longer."""
    inputs = {n for node in chain for n in node.all_input_nodes if n.op == "placeholder"}
    return holds_more([value], inputs, hints)


def holds_more(these: Iterable[fx.Node], than: Iterable[fx.Node], hints: SizeHints) -> bool:
    """Whether ``these`` values hold more bytes together than ``than`` at the size hints;
    False where a size cannot be evaluated (a rewrite is then not worth the risk)."""
    try:
        return _bytes(these, hints) > _bytes(than, hints)
    except (ValueError, TypeError):
        return False


def _bytes(values: Iterable[fx.Node], hints: SizeHints) -> int:
    return hints.evaluate(sum((tensor_bytes(n.meta.get("val")) for n in values), sympy.Integer(0)))
