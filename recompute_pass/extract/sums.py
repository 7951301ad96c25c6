"""Store a recomputed sum of products once, where reading it inline would keep the
products alive.

Inductor computes a pointwise value inside each kernel that reads it. When a recomputed
value such as a LoRA projection, ``base(x) + B(A(x))``, is read by two kernels of
backward (the SwiGLU backward is split in two), both products it sums stay alive until
the second kernel: four product buffers where eager, summing as it goes, holds two.
Storing the value once lets its products die at the kernel that computes it.
"""

from __future__ import annotations

from collections.abc import Collection

from torch import fx

from cost_model import SizeHints
from cost_model.kinds import OpKind, classify
from recompute_pass import torch_internals as ti
from recompute_pass.extract.rebuild import holds_more
from recompute_pass.graph.costing import fuses


def store_sums(backward: fx.GraphModule, recomputed: Collection[str], hints: SizeHints) -> tuple[str, ...]:
    """Stores, in place, each recomputed pointwise value read by several nodes whose
    buffer inputs (read by it alone) hold more bytes than it does; returns their names."""
    graph = backward.graph
    stored: list[str] = []
    order: dict[fx.Node, float] = {n: i for i, n in enumerate(graph.nodes)}  # kept as stores are added
    for node in list(graph.nodes):
        if node.op != "call_function" or node.name not in recomputed or len(node.users) < 2:
            continue
        if classify(node) is not OpKind.POINTWISE or node.is_impure():
            continue
        freed = _freed_by_storing(node, order)
        if not freed or not holds_more(freed, [node], hints):
            continue
        users = list(node.users)
        with graph.inserting_after(node):
            store = graph.call_function(ti.store_op, (node,))
        store.meta = dict(node.meta)
        order[store] = order[node] + 0.5
        for user in users:
            user.replace_input_with(node, store)
        stored.append(node.name)
    if stored:
        backward.recompile()
    return tuple(stored)


def _freed_by_storing(value: fx.Node, order: dict[fx.Node, float]) -> list[fx.Node]:
    """The buffers (kernel outputs, not graph inputs) that only ``value``'s inlined
    computation reads: ``value`` and its fusible ancestors that no other node reads."""
    ancestors: set[fx.Node] = set()
    stack = list(value.all_input_nodes)
    while stack:
        node = stack.pop()
        if node not in ancestors and node.op == "call_function":
            ancestors.add(node)
            if fuses(node):
                stack.extend(node.all_input_nodes)
    inlined, freed = {value}, []
    for node in sorted(ancestors, key=order.__getitem__, reverse=True):  # readers first
        if not set(node.users) <= inlined:
            continue
        if fuses(node):
            inlined.add(node)
        else:
            freed.append(node)
    return freed
