"""Recompute FLOPs of ``torch.utils.checkpoint`` on every block, counted like the graphs.

Full checkpointing reruns each block's forward in backward, so its recompute FLOPs are the
blocks' forward FLOPs. They are counted on a ``make_fx`` trace of each block with
Inductor's decompositions and ``cost_model.node_cost``, the same rules that count the
compiled systems' recomputation (``FlopCounterMode`` would give CPU flash attention 0
FLOPs and pointwise ops 0). Non-reentrant checkpointing stops recomputing once the last
saved tensor is rebuilt, so this is an upper bound by the block's trailing pointwise ops.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils.checkpoint import checkpoint

from cost_model import SizeHints, node_cost
from recompute_pass import torch_internals as ti


def checkpoint_blocks(blocks: Sequence[nn.Module]) -> None:
    """Wrap each block's forward in non-reentrant ``checkpoint``; parameter names stay."""
    for block in blocks:
        block.forward = functools.partial(checkpoint, block.forward, use_reentrant=False)  # type: ignore[method-assign]


def block_forward_flops(
    model: nn.Module, blocks: Sequence[nn.Module], inputs: tuple[torch.Tensor, ...]
) -> int:
    """FLOPs of one forward of every block, with the inputs each block sees in ``model``."""
    calls: list[tuple[nn.Module, tuple[Any, ...], dict[str, Any]]] = []

    def capture(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        calls.append((module, args, kwargs))

    handles = [b.register_forward_pre_hook(capture, with_kwargs=True) for b in blocks]
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        for handle in handles:
            handle.remove()
    total = 0
    for module, args, kwargs in calls:
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        call: Callable[..., Any] = _rebind(module, args, kwargs)
        graph = make_fx(call, decomposition_table=ti.select_decomp_table())(*tensors)
        hints = SizeHints.from_graph(graph)
        total += sum(node_cost(n).evaluate(hints).flops for n in graph.graph.nodes if n.op == "call_function")
    return total


def _rebind(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[..., Any]:
    """``module(*args, **kwargs)`` with the tensor positional arguments as the traced inputs."""

    def call(*tensors: torch.Tensor) -> Any:
        it = iter(tensors)
        rebuilt = tuple(next(it) if isinstance(a, torch.Tensor) else a for a in args)
        return module(*rebuilt, **kwargs)

    return call
