"""The step's memory over time, predicted from the graphs that will run.

Peak is defined once for the project: the max over one forward+backward of bytes
allocated, minus the bytes allocated just before the forward (parameters, buffers and the
batch are there already; parameter ``.grad`` are None). So the prediction walks the
forward graph, then the backward graph, in the order extraction emits them (backward is
reordered to mimic the autograd engine, which places recomputation just before its first
use), and keeps a running total:

- a node allocates its output when it runs, unless the output aliases another value
  (views, ``getitem`` of a multi-output op, in-place ops), or Inductor fuses it away;
- a value is freed after its last use (a view keeps its base alive until the view dies);
- forward outputs outlive the forward: saved tensors until their last backward use, user
  outputs (the loss) to the end of the step; backward outputs (gradients) to the end;
- tangents are allocated when backward starts.

With ``fused=True`` (Inductor) a pointwise value read only by pointwise ops or reductions
is computed inside their kernel and never allocated. Inductor's buffer reuse does not
change the live bytes; its peak-memory reordering can only lower them, so the prediction
errs high where it errs. Sizes are evaluated at the graph's size hints.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import fx

from cost_model import OpKind, SizeHints, classify, tensor_bytes

# Consumers that read a pointwise producer inline in Inductor's generated kernels.
_FUSING_CONSUMERS = frozenset({OpKind.POINTWISE, OpKind.REDUCTION})


@dataclass(frozen=True)
class PeakEstimate:
    """Predicted live bytes over one step and where they peak."""

    peak_bytes: int
    peak_phase: str  # "forward" or "backward"
    peak_node: str  # the node whose allocation reaches the peak
    timeline: tuple[tuple[str, str, int], ...]  # (phase, node, live bytes after it runs)


def predict_peak(
    forward: fx.GraphModule,
    backward: fx.GraphModule,
    *,
    num_user_outputs: int,
    hints: SizeHints,
    fused: bool,
) -> PeakEstimate:
    """Walk both graphs; ``num_user_outputs`` leading forward outputs are the user's."""
    live = 0
    timeline: list[tuple[str, str, int]] = []
    sizes: dict[str, int] = {}  # storage name -> bytes, while live (across both graphs)

    def run(graph: fx.GraphModule, phase: str) -> None:
        nonlocal live
        nodes = list(graph.graph.nodes)
        storage = _storages(nodes)
        fused_away = _fused_away(nodes) if fused else set()
        frees = _frees(nodes, storage)
        for position, node in enumerate(nodes):
            allocates = storage[node] is node and node not in fused_away and not _is_result(node)
            if node.op == "call_function" and allocates:
                # A multi-output op allocates every result; each lives as long as its getitem.
                results = _results(node)
                for owner, value in results.items():
                    size = hints.evaluate(tensor_bytes(value))
                    sizes[owner] = sizes.get(owner, 0) + size
                    live += size
            timeline.append((phase, node.name, live))
            for name in frees.get(position, ()):
                live -= sizes.pop(name, 0)  # inputs that predate the step were never counted

    run(forward, "forward")
    saved = {n.name for n in _outputs(forward)[num_user_outputs:] if isinstance(n, fx.Node)}
    for tangent in backward.graph.find_nodes(op="placeholder"):
        if tangent.name not in saved and isinstance(tangent.meta.get("val"), torch.Tensor):
            size = hints.evaluate(tensor_bytes(tangent.meta["val"]))  # autograd's incoming gradient
            sizes[tangent.name] = size
            live += size
    run(backward, "backward")
    if not timeline:
        return PeakEstimate(0, "forward", "", ())
    peak_index = max(range(len(timeline)), key=lambda i: (timeline[i][2], -i))
    phase, node, peak = timeline[peak_index]
    return PeakEstimate(peak, phase, node, tuple(timeline))


def _outputs(graph: fx.GraphModule) -> Sequence[object]:
    (output,) = graph.graph.find_nodes(op="output")
    values = output.args[0]
    return values if isinstance(values, list | tuple) else (values,)


def _results(node: fx.Node, val: object = None) -> dict[str, object]:
    """The values ``node`` allocates, by the name of the storage that holds each: its own
    for one tensor; for a multi-output op, each result's getitem, through nested tuples
    (results nobody reads are held by the op's own name and freed after it)."""
    val = node.meta.get("val") if val is None else val
    if not isinstance(val, list | tuple):
        return {node.name: val}
    readers = {user.args[1]: user for user in node.users if user.target is operator.getitem}
    results: dict[str, object] = {}
    for index, value in enumerate(val):
        reader = readers.get(index)
        parts = _results(reader, value) if reader is not None else {node.name: value}
        for owner, part in parts.items():
            results[owner] = (*results.get(owner, ()), part)  # type: ignore[misc]
    return results


def _is_result(node: fx.Node) -> bool:
    """A getitem that takes a result of a multi-output op (allocated by the op)."""
    parent = node.args[0] if node.target is operator.getitem else None
    return isinstance(parent, fx.Node) and isinstance(parent.meta.get("val"), list | tuple)


def _aliases_input(node: fx.Node) -> bool:
    """Views and in-place ops share an input's storage."""
    if node.target is operator.getitem:
        return not _is_result(node)
    if classify(node) is OpKind.VIEW:
        return True
    schema = getattr(node.target, "_schema", None)
    return schema is not None and any(r.alias_info is not None for r in schema.returns)


def _storages(nodes: Sequence[fx.Node]) -> dict[fx.Node, fx.Node]:
    """Each node's storage owner: itself, or (through views) the value it aliases."""
    owner: dict[fx.Node, fx.Node] = {}
    for node in nodes:
        base = node.all_input_nodes[0] if node.op == "call_function" and node.all_input_nodes else None
        owner[node] = owner[base] if base is not None and _aliases_input(node) else node
    return owner


def _frees(nodes: Sequence[fx.Node], storage: dict[fx.Node, fx.Node]) -> dict[int, list[str]]:
    """Storage names freed after each position: at the last use of the storage or of any
    view of it; never for what the graph outputs (it outlives the graph)."""
    last: dict[fx.Node, int] = {}
    for position, node in enumerate(nodes):
        for value in (node, *node.all_input_nodes):
            last[storage[value]] = position
    outputs = {storage[arg] for node in nodes if node.op == "output" for arg in node.all_input_nodes}
    frees: dict[int, list[str]] = {}
    for owner, position in last.items():
        if owner not in outputs:
            frees.setdefault(position, []).append(owner.name)
    return frees


def _fused_away(nodes: Sequence[fx.Node]) -> set[fx.Node]:
    """Pointwise values Inductor computes inside their consumers' kernels (never a graph
    output: a consumer that is the output node does not fuse)."""
    away: set[fx.Node] = set()
    for node in nodes:
        if node.op != "call_function" or classify(node) is not OpKind.POINTWISE:
            continue
        if all(user.op == "call_function" and classify(user) in _FUSING_CONSUMERS for user in node.users):
            away.add(node)
    return away
