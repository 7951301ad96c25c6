"""Lazy GraphModules: Python code generated when first run, not when built."""

from __future__ import annotations

import contextlib

import torch
from torch import fx
from torch.fx._lazy_graph_module import _LazyGraphModule, _use_lazy_graph_module

__all__ = [
    "lazy_codegen",
    "lazy_graph_module",
]


def lazy_codegen() -> contextlib.AbstractContextManager[None]:
    """Every GraphModule built inside (PyTorch's extraction, Inductor's passes) is a lazy one:
    a checked plan's graphs are lowered, never run, so their Python code is never needed
    (codegen was a tenth of a 12-layer GPT-2's partitioner time at budget 0)."""
    return _use_lazy_graph_module(True)


def lazy_graph_module(root: torch.nn.Module, graph: fx.Graph) -> fx.GraphModule:
    """A GraphModule whose Python code is generated when first run or read, not when built:
    the peak search builds several graphs per plan and runs only the chosen plan's (on a
    12-layer Llama, codegen was an eighth of the partitioner's time under cProfile)."""
    return _LazyGraphModule(root, graph)
