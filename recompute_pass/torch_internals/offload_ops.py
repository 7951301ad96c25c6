"""PyTorch 2.13's activation-offload ops and the pass that inserts them."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import fx

# Importing it registers the ``ao`` offload ops (``ao.offload``, ``ao.reload``, ``ao.wait_tensor``).
from torch._functorch._activation_offloading.activation_offloading import (
    offload_chosen_sets_async as _offload_chosen_sets_async,
)
from torch._functorch._activation_offloading.offload_ops import pinned_memory_pool

__all__ = [
    "ao_offload",
    "ao_reload",
    "ao_wait_tensor",
    "insert_offload_ops",
    "pinned_memory_pool",
]


# PyTorch 2.13's activation-offload ops (one transfer stream, a pinned host pool): the
# forward emits ``ao.offload`` + ``ao.wait_tensor``, the backward ``ao.reload`` + ``ao.wait_tensor``.
ao_offload = torch.ops.ao.offload.default
ao_reload = torch.ops.ao.reload.default
ao_wait_tensor = torch.ops.ao.wait_tensor.default


def insert_offload_ops(forward: fx.GraphModule, backward: fx.GraphModule, names: Sequence[str]) -> None:
    """PyTorch's pass: each forward output named in ``names`` (a saved tensor) is offloaded
    after its last forward use, and reloaded before its first backward use (both graphs
    edited in place). It reads the ``saved_for_offloading`` mark on the forward's nodes."""
    chosen = set(names)
    (output,) = forward.graph.find_nodes(op="output")
    for node in output.args[0]:
        if isinstance(node, fx.Node) and node.name in chosen:
            node.meta["saved_for_offloading"] = True
    _offload_chosen_sets_async(forward, backward)
