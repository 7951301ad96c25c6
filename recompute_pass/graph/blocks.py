"""Repeated blocks: the transformer layers (or ResNet stages, MoE layers) a graph chains.

Deep models repeat one block N times, and what is lowered per plan should be lowered once
per distinct block (``memory.composed``). A node's block is read from the module it was
traced in: Dynamo records ``nn_module_stack`` on forward nodes and AOTAutograd
``fwd_nn_module_stack`` on the backward nodes it derives from them. The block is the
outermost module path with an integer component (``layers.3``, ``h[3]``,
``getattr(..., '3')``) whose container holds at least two indices in the graph. Which
blocks are alike is decided by a canonical digest of their forward nodes (ops, shapes,
dtypes, and how they connect), not by the module's name, so a graph with no repetition, or
a block type used once, just has fewer repeats.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import fx

from recompute_pass import torch_internals as ti

# An integer path component: ``.3``, ``[3]``, ``['3']`` or ``getattr(prefix, '3')``.
_INDEX = re.compile(r"(?:\.(\d+)|\[['\"]?(\d+)['\"]?\]|,\s*['\"](\d+)['\"]\))(?=$|[.\[)])")

OUTSIDE = -1  # the block label of nodes traced outside every block (embedding, loss)


@dataclass(frozen=True)
class Blocks:
    """``container``: the module path the blocks are indexed in; ``kinds``: per block, in
    index order, its canonical digest (equal digests: structurally identical blocks)."""

    container: str
    indices: tuple[int, ...]
    kinds: tuple[str, ...]

    @property
    def count(self) -> int:
        return len(self.indices)

    @property
    def distinct(self) -> int:
        return len(set(self.kinds))

    def describe(self) -> str:
        short = self.container.rsplit(".", 1)[-1] or self.container
        return f"{self.count} x {short} ({self.distinct} distinct)"


def module_stack(node: fx.Node) -> Mapping[str, tuple[str, object]]:
    return node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack") or {}


def _indexed(path: str) -> tuple[str, int] | None:
    match = _INDEX.search(path)
    if match is None:
        return None
    index = next(group for group in match.groups() if group is not None)
    return path[: match.start()].removeprefix("getattr("), int(index)


def _positions(node: fx.Node) -> list[tuple[str, int]]:
    """Every (container, index) the node's module stack passes through, outermost first."""
    found = []
    for path, _ in module_stack(node).values():
        indexed = _indexed(str(path))
        if indexed is not None and indexed not in found:
            found.append(indexed)
    return found


def _container(graph: fx.Graph) -> str | None:
    """The outermost container whose indices at least two blocks of the graph use."""
    seen: dict[str, set[int]] = defaultdict(set)
    first: dict[str, int] = {}
    for order, node in enumerate(graph.nodes):
        for depth, (container, index) in enumerate(_positions(node)):
            seen[container].add(index)
            first.setdefault(container, depth * 10**9 + order)
    repeated = [c for c, indices in seen.items() if len(indices) >= 2]
    return min(repeated, key=lambda c: (first[c], c)) if repeated else None


def labels(graph: fx.Graph, container: str) -> dict[fx.Node, int]:
    """Each node's block index in ``container`` (``OUTSIDE``: traced outside every block);
    nodes without a module stack (placeholders, the output, some inserted nodes) are absent."""
    result: dict[fx.Node, int] = {}
    for node in graph.nodes:
        if not module_stack(node):
            continue
        index = next((i for c, i in _positions(node) if c == container), OUTSIDE)
        result[node] = index
    return result


def block_labels(graph: fx.Graph) -> dict[fx.Node, int]:
    """Each node's block index (``labels``), empty for a graph without repeated blocks."""
    container = _container(graph)
    return {} if container is None else labels(graph, container)


def find_blocks(graph: fx.Graph) -> Blocks | None:
    """The graph's repeated blocks, None if it has none."""
    container = _container(graph)
    if container is None:
        return None
    of_node = labels(graph, container)
    members: dict[int, list[fx.Node]] = defaultdict(list)
    for node, index in of_node.items():
        if index != OUTSIDE and "nn_module_stack" in node.meta:  # the forward's nodes
            members[index].append(node)
    indices = tuple(sorted(members))
    if len(indices) < 2:
        return None
    return Blocks(container, indices, tuple(digest(members[i]) for i in indices))


def digest(nodes: list[fx.Node]) -> str:
    """Canonical: the nodes' ops, targets, values' shapes and dtypes, and which of them feed
    which (values from outside numbered in order of first use), never their names."""
    local = {node: i for i, node in enumerate(nodes)}
    outside: dict[fx.Node, int] = {}
    hasher = hashlib.sha256()

    def ref(value: fx.Node) -> str:
        if value in local:
            return f"%{local[value]}"
        return f"$in{outside.setdefault(value, len(outside))}:{_value(value)}"

    for node in nodes:
        args = fx.node.map_arg((node.args, node.kwargs), ref)
        if node.target in _NUMBERED:  # which seed a draw uses: memory-neutral
            args = (args[0][:1], args[1])
        hasher.update(f"{node.op}|{_target(node)}|{args}|{_value(node)}\n".encode())
    return hasher.hexdigest()[:16]


# Ops whose constant arguments number instances of a block, not shape its work.
_NUMBERED = frozenset({ti.inductor_lookup_seed})


def _target(node: fx.Node) -> str:
    """Stable across processes: an op's name, a function's qualified name, never an address."""
    target = node.target
    if isinstance(target, (str, ti.OpOverload)):
        return str(target)
    return f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', str(target))}"


def _value(node: fx.Node) -> str:
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return f"{val.dtype}{tuple(val.shape)}{tuple(val.stride())}"
    if isinstance(val, (tuple, list)):
        return str([_value_of(v) for v in val])
    return type(val).__name__


def _value_of(val: object) -> str:
    return f"{val.dtype}{tuple(val.shape)}" if isinstance(val, torch.Tensor) else type(val).__name__
