"""Run-time measurements of a training step, shared by the tests and the benchmarks.

No dispatch mode is involved: under one, Dynamo skips the compiled frame and what is
measured is eager (DESIGN.md).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch.autograd.graph import Node


def _saved_tensors(node: Node) -> list[torch.Tensor]:
    try:  # custom Functions, the compiled step among them
        saved = list(node.saved_tensors)  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError):
        saved = []
    for name in dir(node):  # built-in autograd nodes expose ``_saved_<arg>``
        if name.startswith("_saved_") and not name.startswith("_saved_tensors"):
            value = getattr(node, name, None)
            if isinstance(value, torch.Tensor):
                saved.append(value)
            elif isinstance(value, tuple | list):
                saved += [v for v in value if isinstance(v, torch.Tensor)]
    return saved


def saved_activation_bytes(output: torch.Tensor, exclude: Iterable[torch.Tensor] = ()) -> int:
    """Bytes of storage the autograd graph behind ``output`` holds for backward.

    Walks ``output.grad_fn`` and every node behind it; storages shared by several saved
    tensors count once, and storages of ``exclude`` (parameters, inputs) not at all.
    """
    skip = {t.untyped_storage().data_ptr() for t in exclude}
    storages: dict[int, int] = {}
    seen: set[Node] = set()
    stack = [output.grad_fn] if output.grad_fn is not None else []
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        for tensor in _saved_tensors(node):
            storage = tensor.untyped_storage()
            if storage.data_ptr() not in skip:
                storages[storage.data_ptr()] = storage.nbytes()
        stack += [next_node for next_node, _ in node.next_functions if next_node is not None]
    return sum(storages.values())
