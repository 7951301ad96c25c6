"""Shared helpers for the cost-model tests: cached joint graphs and FLOP references.

Named ``test_cost_model_*`` so it stays within the cost model's test files; it holds a
couple of sanity tests of the helpers themselves.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import fx
from torch.fx.node import map_arg
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.models import model_cases
from cost_model import SizeHints
from cost_model.symbolic import to_expr
from tests.joint_graphs import capture_joint_graphs

MODELS = ("mlp", "cnn", "gpt_block", "llama_block")
BATCH = 4


@functools.cache
def joint_graphs(name: str, dynamic: bool) -> tuple[fx.GraphModule, ...]:
    """The joint graphs of a reference model (captured once per session)."""
    torch.manual_seed(0)
    case = model_cases()[name]
    return tuple(capture_joint_graphs(case.build(), case.inputs(BATCH), dynamic=dynamic))


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


def test_materialize_keeps_layout() -> None:
    gm = joint_graphs("cnn", False)[0]
    hints = SizeHints.from_graph(gm)
    for node in call_nodes(gm):
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            real = materialize(val, hints)
            assert tuple(real.shape) == tuple(val.shape)
            assert real.stride() == val.stride()
            assert real.dtype == val.dtype


def test_joint_graphs_have_tangents_and_shapes() -> None:
    for name in MODELS:
        (gm,) = joint_graphs(name, False)
        placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
        assert any(p.startswith("primals") for p in placeholders)
        assert any(p.startswith("tangents") for p in placeholders)
