"""Canonical names: ``<module path>/<op>`` from the node's ``nn_module_stack``, with
``#k`` for the k-th further op of that kind in that module and ``[i]`` for the i-th
result of a multi-output op, so a report reads like the model and does not change when
unrelated parts of the graph do. Inputs keep AOTAutograd's ``primals_<i>``.
"""

from __future__ import annotations

import operator
import re
from collections import Counter
from collections.abc import Iterable

import torch
from torch import fx

_MODULE_DICT = re.compile(r"(?:\.__dict__\['_modules'\]|\._modules)\['([^']*)'\]")


def canonical_names(nodes: Iterable[fx.Node]) -> dict[fx.Node, str]:
    """Readable names that depend on the model's structure, not on tracing counters."""
    names: dict[fx.Node, str] = {}
    seen: Counter[str] = Counter()
    for node in nodes:
        if node.op != "call_function":
            names[node] = node.name
            continue
        if node.target is operator.getitem and node.args[0] in names:
            names[node] = f"{names[node.args[0]]}[{node.args[1]}]"
            continue
        stack = node.meta.get("nn_module_stack") or {}
        path = next(reversed(stack.values()))[0] if stack else ""
        path = _MODULE_DICT.sub(r".\1", path)  # peft wraps modules: a path through ``_modules``
        path = path.removeprefix("L['self']").removeprefix(".").replace("L['self']", "")
        base = f"{path}/{op_name(node)}" if path else op_name(node)
        names[node] = base if seen[base] == 0 else f"{base}#{seen[base]}"
        seen[base] += 1
    return names


def op_name(node: fx.Node) -> str:
    if node.op == "placeholder":
        return "input"
    target = node.target
    packet = getattr(target, "_overloadpacket", None)
    if packet is not None:
        return packet.__name__
    return getattr(target, "__name__", str(target))


def describe_shape(val: object) -> tuple[str, str]:
    """(shape, dtype) of a node's value, shapes in the graph's symbols."""
    if isinstance(val, torch.Tensor):
        return "[" + ", ".join(str(s) for s in val.shape) + "]", str(val.dtype).removeprefix("torch.")
    if isinstance(val, torch.SymInt | int):
        return str(val), "symint"
    return "-", "-"
