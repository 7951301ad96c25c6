"""Shared helpers for the cost-model tests: reference joint graphs and FLOP references.

A helper module, not collected by pytest; ``tests/eager/test_cost_model_flops.py`` tests the
helpers themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import fx
from torch.fx.node import map_arg
from torch.utils.flop_counter import FlopCounterMode

from cost_model import SizeHints
from cost_model.symbolic import to_expr
from tests.support.joint_graphs import reference_joints

MODELS = ("mlp", "cnn", "gpt_block", "llama_block")


def joint_graphs(name: str, dynamic: bool) -> tuple[fx.GraphModule, ...]:
    """The joint graphs of a reference model (``reference_joints``: captured once, shared)."""
    return tuple(joint.module for joint in reference_joints(name, dynamic=dynamic))


def call_nodes(gm: fx.GraphModule) -> list[fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function"]


def materialize(value: Any, hints: SizeHints) -> Any:
    """A real CPU value shaped like a meta value: same sizes, strides and dtype at the hints."""
    if isinstance(value, torch.Tensor):
        size = [hints.evaluate(to_expr(s)) for s in value.shape]
        stride = [hints.evaluate(to_expr(s)) for s in value.stride()]
        span = 0 if 0 in size else 1 + sum((n - 1) * st for n, st in zip(size, stride, strict=True))
        if value.dtype.is_floating_point:
            storage = torch.randn(span, dtype=value.dtype)
        else:
            storage = torch.zeros(span, dtype=value.dtype)
        return storage.as_strided(size, stride)  # expanded (stride-0) layouts too
    if isinstance(value, torch.SymInt):
        return hints.evaluate(to_expr(value))
    if isinstance(value, (list, tuple)):
        return type(value)(materialize(v, hints) for v in value)
    return value


def node_inputs(node: fx.Node) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The node's args and kwargs with each input node replaced by its meta value."""
    args = map_arg(node.args, lambda n: n.meta.get("val"))
    kwargs = map_arg(node.kwargs, lambda n: n.meta.get("val"))
    return args, kwargs  # type: ignore[return-value]


def counted_flops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """FlopCounterMode's total for one call."""
    with FlopCounterMode(display=False) as counter:
        fn(*args, **kwargs)
    return counter.get_total_flops()


def real_flops(node: fx.Node, hints: SizeHints) -> int:
    """FlopCounterMode's count of ``node``'s op run once on real tensors at the hints."""
    args, kwargs = node_inputs(node)
    return counted_flops(node.target, *materialize(args, hints), **materialize(kwargs, hints))


def fake_flops(node: fx.Node) -> int:
    """FlopCounterMode's count of ``node``'s op run on its own fake inputs (kernels CPU lacks)."""
    args, kwargs = node_inputs(node)
    fake_mode = next(v.fake_mode for v in args if isinstance(v, torch.Tensor))
    with fake_mode:
        return counted_flops(node.target, *args, **kwargs)
